//! An intrusive doubly linked list over page indices, preallocated for a
//! whole region: push, pop and remove are O(1) and never allocate (policies
//! run inside the SIGBUS handler). The link arrays are zero-mapped
//! (`ZeroedArray`, links stored plus one so that "none" is 0): they cost
//! memory only where pages were listed, not per page of the region.

use tiermem_sys::zeroed::ZeroedArray;

/// A page index in a link (64 bits: a 64 TiB region has 2^34 pages).
type Link = u64;

const NONE: Link = Link::MAX;

/// A zero-mapped link array (address space only until written).
fn zeroed(pages: usize) -> ZeroedArray<Link> {
    ZeroedArray::new(pages).unwrap_or_else(|e| panic!("mapping a replacement list for {pages} pages: {e}"))
}

/// A list of page indices; each page is in at most one position.
pub(crate) struct List {
    /// Links plus one (0: none).
    prev: ZeroedArray<Link>,
    next: ZeroedArray<Link>,
    head: Link,
    tail: Link,
    len: usize,
}

impl List {
    /// A list for pages `0..pages`.
    pub(crate) fn new(pages: usize) -> List {
        assert!(pages < NONE as usize, "region too large for its page indices");
        List {
            prev: zeroed(pages),
            next: zeroed(pages),
            head: NONE,
            tail: NONE,
            len: 0,
        }
    }

    fn prev(&self, p: usize) -> Link {
        self.prev[p].wrapping_sub(1)
    }
    fn next(&self, p: usize) -> Link {
        self.next[p].wrapping_sub(1)
    }
    fn set_prev(&mut self, p: usize, v: Link) {
        self.prev[p] = v.wrapping_add(1);
    }
    fn set_next(&mut self, p: usize, v: Link) {
        self.next[p] = v.wrapping_add(1);
    }

    /// Whether `p` is in the list.
    pub(crate) fn contains(&self, p: usize) -> bool {
        self.prev(p) != NONE || self.head == p as Link
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
        let (pr, nx) = (self.prev(p), self.next(p));
        if pr == NONE {
            self.head = nx;
        } else {
            self.set_next(pr as usize, nx);
        }
        if nx == NONE {
            self.tail = pr;
        } else {
            self.set_prev(nx as usize, pr);
        }
        self.set_prev(p, NONE);
        self.set_next(p, NONE);
        self.len -= 1;
    }

    /// Appends `p` (which must not be present).
    pub(crate) fn push_back(&mut self, p: usize) {
        debug_assert!(!self.contains(p));
        self.set_prev(p, self.tail);
        self.set_next(p, NONE);
        if self.tail == NONE {
            self.head = p as Link;
        } else {
            self.set_next(self.tail as usize, p as Link);
        }
        self.tail = p as Link;
        self.len += 1;
    }

    /// Prepends `p` (which must not be present).
    pub(crate) fn push_front(&mut self, p: usize) {
        debug_assert!(!self.contains(p));
        self.set_next(p, self.head);
        self.set_prev(p, NONE);
        if self.head == NONE {
            self.tail = p as Link;
        } else {
            self.set_prev(self.head as usize, p as Link);
        }
        self.head = p as Link;
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
