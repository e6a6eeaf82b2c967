//! FIFO replacement by fill order, as in paper 1 (Gerofi et al., section
//! IV.B: "data movement was performed in a synchronous fashion inside the
//! page fault handler, using FIFO page replacement policy").
//!
//! An intrusive doubly linked list over page indices, preallocated for the
//! whole region: push, pop and remove are O(1) and never allocate, so the
//! list can be used from a signal handler.

use super::Policy;

const NONE: u32 = u32::MAX;

/// First filled, first evicted.
pub struct Fifo {
    prev: Box<[u32]>,
    next: Box<[u32]>,
    head: u32,
    tail: u32,
    len: usize,
}

impl Fifo {
    /// A FIFO for a region of `pages` pages.
    pub fn new(pages: usize) -> Fifo {
        assert!(pages < NONE as usize, "region too large for 32-bit page indices");
        Fifo {
            prev: vec![NONE; pages].into_boxed_slice(),
            next: vec![NONE; pages].into_boxed_slice(),
            head: NONE,
            tail: NONE,
            len: 0,
        }
    }

    fn linked(&self, p: usize) -> bool {
        self.prev[p] != NONE || self.head == p as u32
    }

    fn unlink(&mut self, p: usize) {
        let (pr, nx) = (self.prev[p], self.next[p]);
        if pr == NONE {
            self.head = nx;
        } else {
            self.next[pr as usize] = nx;
        }
        if nx == NONE {
            self.tail = pr;
        } else {
            self.prev[nx as usize] = pr;
        }
        self.prev[p] = NONE;
        self.next[p] = NONE;
        self.len -= 1;
    }

    fn push_back(&mut self, p: usize) {
        self.prev[p] = self.tail;
        self.next[p] = NONE;
        if self.tail == NONE {
            self.head = p as u32;
        } else {
            self.next[self.tail as usize] = p as u32;
        }
        self.tail = p as u32;
        self.len += 1;
    }
}

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn on_fill(&mut self, page: usize) {
        // A refill of a page still listed (a discard raced with it) moves it
        // to the back: it was filled last.
        if self.linked(page) {
            self.unlink(page);
        }
        self.push_back(page);
    }

    fn on_remove(&mut self, page: usize, still_resident: bool) {
        if self.linked(page) {
            self.unlink(page);
        }
        if still_resident {
            // An eviction that failed (far store full): keep the page, but
            // last in line so other victims are tried first.
            self.push_back(page);
        }
    }

    fn select_victims(&mut self, out: &mut [usize]) -> usize {
        let mut n = 0;
        while n < out.len() && self.head != NONE {
            let p = self.head as usize;
            self.unlink(p);
            out[n] = p;
            n += 1;
        }
        n
    }

    fn tracked(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_in_fill_order() {
        let mut f = Fifo::new(10);
        for p in [3, 1, 4, 5, 9] {
            f.on_fill(p);
        }
        let mut out = [0; 2];
        assert_eq!(f.select_victims(&mut out), 2);
        assert_eq!(out, [3, 1]);
        assert_eq!(f.tracked(), 3);
        let mut out = [0; 8];
        assert_eq!(f.select_victims(&mut out), 3);
        assert_eq!(&out[..3], &[4, 5, 9]);
        assert_eq!(f.select_victims(&mut out), 0);
    }

    #[test]
    fn remove_and_refill_keep_the_list_consistent() {
        let mut f = Fifo::new(8);
        for p in 0..5 {
            f.on_fill(p);
        }
        f.on_remove(2, false);
        f.on_remove(0, false);
        f.on_remove(4, false);
        f.on_remove(6, false); // not listed: no-op
        f.on_fill(1); // refill moves 1 to the back
        f.on_remove(3, true); // failed eviction: back of the line
        let mut out = [0; 8];
        let n = f.select_victims(&mut out);
        assert_eq!(&out[..n], &[1, 3]);
        assert_eq!(f.tracked(), 0);
        f.on_fill(0);
        assert_eq!(f.select_victims(&mut out[..1]), 1);
        assert_eq!(out[0], 0);
    }

    #[test]
    fn randomized_against_a_model() {
        use std::collections::VecDeque;
        let mut f = Fifo::new(64);
        let mut model: VecDeque<usize> = VecDeque::new();
        let mut x = 12345u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = (x % 64) as usize;
            match x % 5 {
                0 | 1 => {
                    model.retain(|&q| q != p);
                    model.push_back(p);
                    f.on_fill(p);
                }
                2 => {
                    model.retain(|&q| q != p);
                    f.on_remove(p, false);
                }
                _ => {
                    let mut out = [0; 3];
                    let n = f.select_victims(&mut out);
                    let want: Vec<usize> = (0..n).map(|_| model.pop_front().unwrap()).collect();
                    assert_eq!(&out[..n], &want[..]);
                    if n < 3 {
                        assert!(model.is_empty());
                    }
                }
            }
            assert_eq!(f.tracked(), model.len());
        }
    }
}
