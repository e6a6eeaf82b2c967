//! One arena's extents: best fit over free ranges kept by address (for
//! coalescing) and by size (for the fit), both O(log n); allocations kept
//! by address. All in units of bytes, every range a multiple of the unit.

use std::collections::{BTreeMap, BTreeSet};

/// The length an allocation of `size` bytes takes: whole units, at least
/// one (None on overflow).
pub(crate) fn round_len(size: usize, unit: usize) -> Option<usize> {
    size.max(1).checked_next_multiple_of(unit)
}

/// Free and used ranges of `[start, start + len)`.
#[derive(Debug)]
pub(crate) struct Extents {
    unit: usize,
    /// Free ranges: start -> length.
    free_by_addr: BTreeMap<usize, usize>,
    /// The same, as (length, start).
    free_by_size: BTreeSet<(usize, usize)>,
    /// Allocations: start -> length (a multiple of `unit`).
    used: BTreeMap<usize, usize>,
    /// Bytes allocated now.
    pub(crate) used_bytes: usize,
}

impl Extents {
    /// All of `[start, start + len)` free; `unit` a power of two dividing
    /// both.
    pub(crate) fn new(start: usize, len: usize, unit: usize) -> Extents {
        debug_assert!(unit.is_power_of_two() && start.is_multiple_of(unit) && len.is_multiple_of(unit));
        let mut e = Extents {
            unit,
            free_by_addr: BTreeMap::new(),
            free_by_size: BTreeSet::new(),
            used: BTreeMap::new(),
            used_bytes: 0,
        };
        if len > 0 {
            e.insert_free(start, len);
        }
        e
    }

    fn insert_free(&mut self, start: usize, len: usize) {
        self.free_by_addr.insert(start, len);
        self.free_by_size.insert((len, start));
    }

    fn remove_free(&mut self, start: usize, len: usize) {
        self.free_by_addr.remove(&start);
        self.free_by_size.remove(&(len, start));
    }

    /// Allocates `size` bytes (rounded up to the unit) aligned to `align`
    /// (a power of two): the smallest free range that fits. Returns the
    /// start and the rounded length.
    pub(crate) fn alloc(&mut self, size: usize, align: usize) -> Option<(usize, usize)> {
        let len = round_len(size, self.unit)?;
        let align = align.max(self.unit);
        // Best fit; with an alignment larger than the unit a range may need
        // up to `align - unit` bytes more, so look for that much first and
        // fall back to scanning larger ranges.
        let slack = align - self.unit;
        let mut pick = None;
        for &(flen, fstart) in self.free_by_size.range((len, 0)..) {
            let a = fstart.next_multiple_of(align);
            if a + len <= fstart + flen {
                pick = Some((fstart, flen, a));
                break;
            }
            if flen >= len + slack {
                // Larger ranges fit whatever their alignment: take it.
                pick = Some((fstart, flen, a));
                break;
            }
        }
        let (fstart, flen, a) = pick?;
        self.remove_free(fstart, flen);
        if a > fstart {
            self.insert_free(fstart, a - fstart);
        }
        if a + len < fstart + flen {
            self.insert_free(a + len, fstart + flen - (a + len));
        }
        self.used.insert(a, len);
        self.used_bytes += len;
        Some((a, len))
    }

    /// Frees the allocation at `start`; returns its length, or None if no
    /// allocation starts there.
    pub(crate) fn free(&mut self, start: usize) -> Option<usize> {
        let len = self.used.remove(&start)?;
        self.used_bytes -= len;
        let (mut s, mut l) = (start, len);
        if let Some((&ps, &pl)) = self.free_by_addr.range(..s).next_back() {
            if ps + pl == s {
                self.remove_free(ps, pl);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free_by_addr.get(&(start + len)) {
            self.remove_free(start + len, nl);
            l += nl;
        }
        self.insert_free(s, l);
        Some(len)
    }

    /// Allocations live now.
    pub(crate) fn count(&self) -> usize {
        self.used.len()
    }

    /// The length of the allocation at `start`.
    pub(crate) fn len_of(&self, start: usize) -> Option<usize> {
        self.used.get(&start).copied()
    }

    /// Grows or shrinks the allocation at `start` to `size` bytes (rounded
    /// up) without moving it, if the range after it is free. Returns the
    /// old and new lengths.
    pub(crate) fn resize_in_place(&mut self, start: usize, size: usize) -> Option<(usize, usize)> {
        let old = *self.used.get(&start)?;
        let new = round_len(size, self.unit)?;
        if new == old {
            return Some((old, new));
        }
        if new < old {
            self.used.insert(start, new);
            self.used_bytes -= old - new;
            // The tail becomes free (coalesced through a temporary use).
            self.used.insert(start + new, old - new);
            self.used_bytes += old - new;
            self.free(start + new);
            return Some((old, new));
        }
        let next = start + old;
        let &nl = self.free_by_addr.get(&next)?;
        let grow = new - old;
        if nl < grow {
            return None;
        }
        self.remove_free(next, nl);
        if nl > grow {
            self.insert_free(next + grow, nl - grow);
        }
        self.used.insert(start, new);
        self.used_bytes += grow;
        Some((old, new))
    }

    /// The allocation containing `addr`: (start, length).
    pub(crate) fn containing(&self, addr: usize) -> Option<(usize, usize)> {
        let (&s, &l) = self.used.range(..=addr).next_back()?;
        (addr < s + l).then_some((s, l))
    }

    /// The allocations that overlap `[a, b)`, in address order, into `out`.
    pub(crate) fn overlapping(&self, a: usize, b: usize, out: &mut Vec<(usize, usize)>) {
        out.extend(self.containing(a).filter(|&(s, _)| s < a));
        out.extend(self.used.range(a..b).map(|(&s, &l)| (s, l)));
    }

    /// Cuts `[a, b)` (whole units inside the allocation at `start`) out of
    /// it, as `munmap` of part of a mapping does: what is left before and
    /// after stays allocated (the allocation shrinks, starts later, or is
    /// split in two), the cut becomes free. False if no allocation at
    /// `start` holds `[a, b)`.
    pub(crate) fn cut(&mut self, start: usize, a: usize, b: usize) -> bool {
        let Some(&len) = self.used.get(&start) else {
            return false;
        };
        let end = start + len;
        if !(start <= a && a < b && b <= end && a.is_multiple_of(self.unit) && b.is_multiple_of(self.unit)) {
            return false;
        }
        // The pieces as allocations (their lengths add up to the old one,
        // so `used_bytes` holds), then the cut freed (coalesced).
        self.used.remove(&start);
        if a > start {
            self.used.insert(start, a - start);
        }
        self.used.insert(a, b - a);
        if end > b {
            self.used.insert(b, end - b);
        }
        self.free(a).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: usize = 4096;

    #[test]
    fn best_fit_alignment_coalescing() {
        let mut e = Extents::new(0, 100 * U, U);
        let (a, la) = e.alloc(1, 1).unwrap();
        assert_eq!((a, la), (0, U));
        let (b, _) = e.alloc(10 * U, 1).unwrap();
        let (c, _) = e.alloc(2 * U, 1).unwrap();
        assert_eq!((b, c), (U, 11 * U));
        // A hole of 10 units; a 3-unit request goes to the smallest fit.
        e.free(b).unwrap();
        let (d, _) = e.alloc(3 * U, 1).unwrap();
        assert_eq!(d, U, "the hole (10) is smaller than the tail (87)");
        // Alignment: 64 KiB.
        let (f, _) = e.alloc(U, 16 * U).unwrap();
        assert_eq!(f % (16 * U), 0);
        assert_eq!(e.free(12345), None);
        for s in [a, c, d, f] {
            e.free(s).unwrap();
        }
        assert_eq!(e.free_by_addr.len(), 1, "all coalesced: {:?}", e.free_by_addr);
        assert_eq!(e.used_bytes, 0);
        assert!(e.alloc(101 * U, 1).is_none());
        assert_eq!(e.alloc(100 * U, 1), Some((0, 100 * U)));
    }

    #[test]
    fn resize_in_place_and_containing() {
        let mut e = Extents::new(0, 64 * U, U);
        let (a, _) = e.alloc(4 * U, 1).unwrap();
        assert_eq!(e.resize_in_place(a, 8 * U), Some((4 * U, 8 * U)));
        let (b, _) = e.alloc(U, 1).unwrap();
        assert_eq!(b, 8 * U);
        assert_eq!(e.resize_in_place(a, 9 * U), None, "blocked by b");
        assert_eq!(e.resize_in_place(a, 2 * U), Some((8 * U, 2 * U)));
        assert_eq!(e.containing(U + 5), Some((0, 2 * U)));
        assert_eq!(e.containing(3 * U), None);
        assert_eq!(
            e.alloc(6 * U, 1),
            Some((2 * U, 6 * U)),
            "the freed tail is reused"
        );
        assert_eq!(e.used_bytes, 9 * U);
    }

    #[test]
    fn cut_head_tail_middle_and_whole() {
        let mut e = Extents::new(0, 64 * U, U);
        let (a, _) = e.alloc(16 * U, 1).unwrap();
        let (b, _) = e.alloc(4 * U, 1).unwrap();
        assert_eq!((a, b), (0, 16 * U));
        let mut o = Vec::new();
        e.overlapping(15 * U, 17 * U, &mut o);
        assert_eq!(o, [(0, 16 * U), (16 * U, 4 * U)]);
        assert!(!e.cut(a, 15 * U, 17 * U), "beyond the allocation");
        assert!(!e.cut(a, 3, U), "not whole units");
        // Middle: two allocations, the hole free.
        assert!(e.cut(a, 4 * U, 6 * U));
        assert_eq!(e.containing(U), Some((0, 4 * U)));
        assert_eq!(e.containing(5 * U), None);
        assert_eq!(e.containing(7 * U), Some((6 * U, 10 * U)));
        // Head and tail.
        assert!(e.cut(6 * U, 6 * U, 8 * U));
        assert!(e.cut(8 * U, 14 * U, 16 * U));
        assert_eq!(e.containing(8 * U), Some((8 * U, 6 * U)));
        assert_eq!(e.used_bytes, (4 + 6 + 4) * U);
        // Whole: the same as free.
        assert!(e.cut(b, b, b + 4 * U));
        assert_eq!(e.used_bytes, 10 * U);
        // The holes coalesced with their neighbours: 4..8 and 14..64 free.
        assert_eq!(e.free_by_addr.get(&(4 * U)), Some(&(4 * U)));
        assert_eq!(e.free_by_addr.get(&(14 * U)), Some(&(50 * U)));
    }
}
