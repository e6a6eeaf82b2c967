//! A ring of page frames for zero-copy installs by the movers
//! (`install = move`).
//!
//! Frames circulate instead of being allocated and freed: an evicted run
//! is *moved* (`UFFDIO_MOVE`) out of the region into holes of the ring, its
//! dirty pages are written back from there, and the frames stay in the
//! ring; a fill copies far data into frames at the ring's head and moves
//! them into the region. Neither path allocates or zeroes a page, and the
//! kernel copies nothing: measured here at 0.7 us per page per cycle
//! against 1.8 us for `UFFDIO_COPY` + `MADV_DONTNEED`
//! (`crates/tiermem-sys/examples/install_costs.rs`). Moving a run out is
//! also an atomic unmap, so dirty pages need no write protection before
//! their write-back.
//!
//! Layout: positions `[head, head + frames)` (mod `cap`) hold frames, the
//! others are holes. Fills take frames at the head, evictions fill holes at
//! the tail. The ring's mapping is registered with the region's
//! userfaultfd (the kernel moves pages only into ranges registered with the
//! same descriptor), so a hole must never be touched: every access goes
//! through the positions the state says hold frames. The ring is populated
//! before registration for that reason.
//!
//! Frames in the ring are near memory: the ring's size is taken from the
//! region's budget.

use std::sync::{Mutex, MutexGuard};
use tiermem_sys::mm::{MapOptions, Mapping};
use tiermem_sys::uffd::{RegisterMode, Registration, Uffd};

/// The frame ring of one region.
pub(crate) struct FrameRing {
    // Unmapping the ring also unregisters it; the region's descriptor,
    // which the registration refers to, outlives the ring.
    pub(crate) map: Mapping,
    pub(crate) reg: Registration,
    pub(crate) cap: usize,
    state: Mutex<RingState>,
}

/// Where the frames are.
pub(crate) struct RingState {
    pub(crate) head: usize,
    pub(crate) frames: usize,
}

impl RingState {
    /// The contiguous frames at the head: (position, count).
    pub(crate) fn frames_run(&self, cap: usize) -> (usize, usize) {
        (self.head, self.frames.min(cap - self.head))
    }

    /// The contiguous holes at the tail: (position, count).
    pub(crate) fn holes_run(&self, cap: usize) -> (usize, usize) {
        let tail = (self.head + self.frames) % cap;
        (tail, (cap - self.frames).min(cap - tail))
    }

    /// `n` frames left the head.
    pub(crate) fn took(&mut self, n: usize, cap: usize) {
        debug_assert!(n <= self.frames);
        self.head = (self.head + n) % cap;
        self.frames -= n;
    }

    /// `n` holes at the tail became frames.
    pub(crate) fn filled(&mut self, n: usize, cap: usize) {
        debug_assert!(self.frames + n <= cap);
        self.frames += n;
    }
}

impl FrameRing {
    /// A ring of `pages` frames of `page_bytes`, registered with `uffd`.
    pub(crate) fn new(uffd: &Uffd, pages: usize, page_bytes: usize) -> Result<FrameRing, crate::Error> {
        let (map, _) = Mapping::anonymous(
            pages * page_bytes,
            &MapOptions {
                dontfork: true,
                ..Default::default()
            },
        )?;
        map.advise(0, map.len(), tiermem_sys::mm::Advice::NoHugePage)?;
        // Populate every frame before registering: a hole of a registered
        // range must never be touched.
        map.fill(0, map.len(), 0);
        let reg = uffd.register(&map, RegisterMode::MISSING)?;
        Ok(FrameRing {
            map,
            reg,
            cap: pages,
            state: Mutex::new(RingState {
                head: 0,
                frames: pages,
            }),
        })
    }

    /// Locks the ring for one fill or eviction.
    pub(crate) fn lock(&self) -> MutexGuard<'_, RingState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_holes_stay_contiguous_modulo_wrap() {
        let cap = 8;
        let mut s = RingState { head: 0, frames: 8 };
        assert_eq!(s.frames_run(cap), (0, 8));
        assert_eq!(s.holes_run(cap).1, 0);
        s.took(5, cap);
        assert_eq!((s.head, s.frames), (5, 3));
        assert_eq!(s.frames_run(cap), (5, 3));
        assert_eq!(s.holes_run(cap), (0, 5));
        s.filled(4, cap);
        assert_eq!(s.holes_run(cap), (4, 1));
        s.took(3, cap); // head wraps to 0
        assert_eq!((s.head, s.frames), (0, 4));
        assert_eq!(s.frames_run(cap), (0, 4));
        assert_eq!(s.holes_run(cap), (4, 4));
    }
}
