//! FIFO replacement by fill order, as in paper 1 (Gerofi et al., section
//! IV.B: "data movement was performed in a synchronous fashion inside the
//! page fault handler, using FIFO page replacement policy").

use super::list::List;
use super::Policy;

/// First filled, first evicted.
pub struct Fifo {
    list: List,
}

impl Fifo {
    /// A FIFO for a region of `pages` pages.
    pub fn new(pages: usize) -> Fifo {
        Fifo {
            list: List::new(pages),
        }
    }
}

impl Policy for Fifo {
    fn on_fill(&mut self, page: usize) {
        // A refill of a page still listed (a discard raced with it) moves it
        // to the back: it was filled last.
        self.list.remove(page);
        self.list.push_back(page);
    }

    fn on_remove(&mut self, page: usize, still_resident: bool) {
        self.list.remove(page);
        if still_resident {
            // An eviction that failed (far store full): keep the page, but
            // last in line so other victims are tried first.
            self.list.push_back(page);
        }
    }

    fn select_victims(&mut self, out: &mut [usize]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.list.pop_front() {
                Some(p) => {
                    out[n] = p;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    fn tracked(&self) -> usize {
        self.list.len()
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
    }
}
