//! A scan-resistant policy for cyclic sweeps larger than the budget.
//!
//! With FIFO or LRU, a loop over `N` pages through a budget of `B < N`
//! pages misses on every page of every pass: each page is evicted just
//! before it is needed again. The optimal policy (Belady's) keeps a fixed
//! set of about `B` pages resident and cycles the rest through what is
//! left, so it misses on `N - B` pages per pass: about half as many for a
//! sweep twice the budget.
//!
//! `scan` approximates that with most-recently-filled eviction outside a
//! protected window: the last `window` filled pages (the loop's working
//! neighbourhood, including what the prefetcher just brought in) are never
//! chosen; among the older pages, the most recently filled goes first. A
//! cyclic sweep then keeps its first `B - window` pages resident from one
//! pass to the next. Pages accessed at random see the same miss rate as with
//! FIFO (no policy without future knowledge does better on uniform random
//! accesses).
//!
//! Two intrusive lists: `recent` (the window, in fill order) and `older`
//! (everything else, in the order pages left the window); a fill appends to
//! `recent` and moves its oldest entry to the tail of `older`; victims come
//! from the tail of `older`. All O(1), preallocated, no allocation.

use super::list::List;
use super::Policy;

/// The lists scan-resistant policies keep: the last `window` fills
/// (`recent`, in fill order) and every older page (`older`, in the order
/// it left the window).
pub(super) struct Aged {
    pub(super) recent: List,
    pub(super) older: List,
    window: usize,
}

impl Aged {
    pub(super) fn new(pages: usize, window: usize) -> Aged {
        Aged {
            recent: List::new(pages),
            older: List::new(pages),
            window: window.max(1),
        }
    }

    /// `page` was filled: the young end of the window; the window's oldest
    /// moves to the young end of `older`.
    pub(super) fn fill(&mut self, page: usize) {
        self.remove(page);
        self.recent.push_back(page);
        while self.recent.len() > self.window {
            if let Some(p) = self.recent.pop_front() {
                self.older.push_back(p);
            }
        }
    }

    pub(super) fn remove(&mut self, page: usize) {
        self.older.remove(page);
        self.recent.remove(page);
    }

    pub(super) fn len(&self) -> usize {
        self.recent.len() + self.older.len()
    }
}

/// Most-recently-filled-first eviction outside a protected window.
pub struct Scan {
    lists: Aged,
}

impl Scan {
    /// A policy for `pages` pages that protects the last `window` fills.
    pub fn new(pages: usize, window: usize) -> Scan {
        Scan {
            lists: Aged::new(pages, window),
        }
    }
}

impl Policy for Scan {
    fn on_fill(&mut self, page: usize) {
        self.lists.fill(page);
    }

    fn on_remove(&mut self, page: usize, still_resident: bool) {
        self.lists.remove(page);
        if still_resident {
            // Failed eviction: try it last.
            self.lists.older.push_front(page);
        }
    }

    fn evictable(&self, page: usize) -> bool {
        !self.lists.recent.contains(page)
    }

    fn select_victims(&mut self, out: &mut [usize]) -> usize {
        let mut n = 0;
        while n < out.len() {
            // Older pages first, most recently demoted first; the window
            // only when nothing else is left.
            let p = match self.lists.older.pop_back() {
                Some(p) => p,
                None => match self.lists.recent.pop_front() {
                    Some(p) => p,
                    None => break,
                },
            };
            out[n] = p;
            n += 1;
        }
        n
    }

    fn tracked(&self) -> usize {
        self.lists.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::fifo::Fifo;
    use crate::policy::testing::{misses, xorshift};

    /// Misses of a cyclic sweep of `n` pages through `budget` pages.
    fn loop_misses(policy: &mut dyn Policy, n: usize, budget: usize, passes: usize) -> usize {
        misses(policy, (0..passes).flat_map(|_| 0..n), n, budget)
    }

    #[test]
    fn a_loop_twice_the_budget_misses_about_half_as_often_as_fifo() {
        let (n, b, passes) = (2000, 1000, 10);
        let fifo = loop_misses(&mut Fifo::new(n), n, b, passes);
        let scan = loop_misses(&mut Scan::new(n, 50), n, b, passes);
        assert_eq!(fifo, n * passes, "FIFO misses everything");
        let optimal = n + (passes - 1) * (n - b + 1);
        assert!(scan <= optimal + passes * 60, "scan {scan} vs optimal {optimal}");
        assert!((scan as f64) <= 0.6 * fifo as f64, "scan {scan} fifo {fifo}");
    }

    #[test]
    fn uniform_random_accesses_miss_like_fifo() {
        let (n, b) = (4000, 1000);
        let run = |policy: &mut dyn Policy| {
            let accesses = xorshift(88172645463325252)
                .take(200_000)
                .map(|x| (x % n as u64) as usize);
            misses(policy, accesses, n, b) as f64
        };
        let fifo = run(&mut Fifo::new(n));
        let scan = run(&mut Scan::new(n, 50));
        assert!(scan < fifo * 1.02, "scan {scan} fifo {fifo}");
    }

    #[test]
    fn removal_and_failed_eviction() {
        let mut s = Scan::new(16, 2);
        for p in 0..6 {
            s.on_fill(p);
        }
        // recent = [4, 5]; older = [0, 1, 2, 3]
        s.on_remove(3, false);
        s.on_remove(1, true); // back of the line: older = [1, 0, 2]
        let mut out = [0; 8];
        let k = s.select_victims(&mut out);
        assert_eq!(&out[..k], &[2, 0, 1, 4, 5]);
        assert_eq!(s.tracked(), 0);
    }
}
