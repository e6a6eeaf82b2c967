//! An intrusive doubly linked list over page indices, preallocated for a
//! whole region: push, pop and remove are O(1) and never allocate (policies
//! run inside the SIGBUS handler).

const NONE: u32 = u32::MAX;

/// A list of page indices; each page is in at most one position.
pub(crate) struct List {
    prev: Box<[u32]>,
    next: Box<[u32]>,
    head: u32,
    tail: u32,
    len: usize,
}

impl List {
    /// A list for pages `0..pages`.
    pub(crate) fn new(pages: usize) -> List {
        assert!(pages < NONE as usize, "region too large for 32-bit page indices");
        List {
            prev: vec![NONE; pages].into_boxed_slice(),
            next: vec![NONE; pages].into_boxed_slice(),
            head: NONE,
            tail: NONE,
            len: 0,
        }
    }

    /// Whether `p` is in the list.
    pub(crate) fn contains(&self, p: usize) -> bool {
        self.prev[p] != NONE || self.head == p as u32
    }

    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Removes `p` if present.
    pub(crate) fn remove(&mut self, p: usize) {
        if !self.contains(p) {
            return;
        }
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

    /// Appends `p` (which must not be present).
    pub(crate) fn push_back(&mut self, p: usize) {
        debug_assert!(!self.contains(p));
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

    /// Prepends `p` (which must not be present).
    pub(crate) fn push_front(&mut self, p: usize) {
        debug_assert!(!self.contains(p));
        self.next[p] = self.head;
        self.prev[p] = NONE;
        if self.head == NONE {
            self.tail = p as u32;
        } else {
            self.prev[self.head as usize] = p as u32;
        }
        self.head = p as u32;
        self.len += 1;
    }

    /// Removes and returns the first entry.
    pub(crate) fn pop_front(&mut self) -> Option<usize> {
        let h = self.head;
        (h != NONE).then(|| {
            self.remove(h as usize);
            h as usize
        })
    }

    /// Removes and returns the last entry.
    pub(crate) fn pop_back(&mut self) -> Option<usize> {
        let t = self.tail;
        (t != NONE).then(|| {
            self.remove(t as usize);
            t as usize
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn randomized_against_a_vecdeque() {
        use std::collections::VecDeque;
        let mut l = List::new(32);
        let mut m: VecDeque<usize> = VecDeque::new();
        let mut x = 7u64;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = (x % 32) as usize;
            match x % 6 {
                0 => {
                    if !m.contains(&p) {
                        m.push_back(p);
                        l.push_back(p);
                    }
                }
                1 => {
                    if !m.contains(&p) {
                        m.push_front(p);
                        l.push_front(p);
                    }
                }
                2 => {
                    m.retain(|&q| q != p);
                    l.remove(p);
                }
                3 => assert_eq!(l.pop_front(), m.pop_front()),
                4 => assert_eq!(l.pop_back(), m.pop_back()),
                _ => assert_eq!(l.contains(p), m.contains(&p)),
            }
            assert_eq!(l.len(), m.len());
            for q in 0..32 {
                assert_eq!(l.contains(q), m.contains(&q));
            }
        }
    }
}
