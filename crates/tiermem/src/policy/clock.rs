//! CLOCK (second chance) over the pages' reference bits.
//!
//! Pages sit on a circular list in fill order; a page whose reference bit
//! is set when the hand reaches it gets a second chance (the bit is cleared
//! and the page moves behind the hand), otherwise it is evicted.
//!
//! The reference bit comes from what user space can really observe of an
//! access: the write-protect fault a write to a clean page takes (dirty
//! tracking `wp-fault`). This kernel has no idle-page tracking
//! (`CONFIG_IDLE_PAGE_TRACKING` is off) and `PAGEMAP_SCAN` does not report
//! the accessed bit, so reads of a resident page are invisible: for pages
//! that are only read, CLOCK degrades to FIFO (see `docs/policies.md`).

use super::list::List;
use super::Policy;

/// Second-chance replacement.
pub struct Clock {
    ring: List,
    referenced: tiermem_sys::zeroed::ZeroedArray<bool>,
}

impl Clock {
    /// A CLOCK for `pages` pages.
    pub fn new(pages: usize) -> Clock {
        Clock {
            ring: List::new(pages),
            referenced: tiermem_sys::zeroed::ZeroedArray::new(pages)
                .unwrap_or_else(|e| panic!("mapping reference bits for {pages} pages: {e}")),
        }
    }
}

impl Policy for Clock {
    fn on_fill(&mut self, page: usize) {
        self.ring.remove(page);
        self.ring.push_back(page);
        self.referenced[page] = false;
    }

    fn on_access(&mut self, page: usize) {
        if self.ring.contains(page) {
            self.referenced[page] = true;
        }
    }

    fn evictable(&self, page: usize) -> bool {
        !self.referenced[page]
    }

    fn on_remove(&mut self, page: usize, still_resident: bool) {
        self.ring.remove(page);
        if still_resident {
            self.ring.push_back(page);
        }
    }

    fn select_victims(&mut self, out: &mut [usize]) -> usize {
        let mut n = 0;
        // Each page is passed over at most once per call: a full turn clears
        // every bit, so at most 2x len steps find victims.
        let mut budget = 2 * self.ring.len() + 1;
        while n < out.len() && budget > 0 {
            budget -= 1;
            let Some(p) = self.ring.pop_front() else { break };
            if self.referenced[p] {
                self.referenced[p] = false;
                self.ring.push_back(p);
            } else {
                out[n] = p;
                n += 1;
            }
        }
        n
    }

    fn tracked(&self) -> usize {
        self.ring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn referenced_pages_get_a_second_chance() {
        let mut c = Clock::new(8);
        for p in 0..4 {
            c.on_fill(p);
        }
        c.on_access(0);
        c.on_access(2);
        c.on_access(7); // not resident: ignored
        let mut out = [0; 2];
        assert_eq!(c.select_victims(&mut out), 2);
        assert_eq!(out, [1, 3]);
        // 0 and 2 had their bits cleared: they go next.
        assert_eq!(c.select_victims(&mut out), 2);
        assert_eq!(out, [0, 2]);
        assert_eq!(c.tracked(), 0);
    }

    #[test]
    fn all_referenced_still_yields_victims() {
        let mut c = Clock::new(4);
        for p in 0..4 {
            c.on_fill(p);
            c.on_access(p);
        }
        let mut out = [0; 3];
        assert_eq!(c.select_victims(&mut out), 3);
        assert_eq!(out, [0, 1, 2]);
    }

    #[test]
    fn a_hot_page_survives_a_stream() {
        // One page touched between every fill survives many evictions.
        let mut c = Clock::new(100);
        c.on_fill(0);
        let mut evicted_hot = false;
        for p in 1..100 {
            c.on_access(0);
            c.on_fill(p);
            if c.tracked() > 10 {
                let mut v = [0];
                c.select_victims(&mut v);
                evicted_hot |= v[0] == 0;
            }
        }
        assert!(!evicted_hot);
    }
}
