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
//! the tail.
//!
//! Concurrency: the state lock guards the bookkeeping only; data moves
//! outside it. Fills reserve frames from the head on (`reserved`: the
//! first `reserved` positions from the head are taken by fills in
//! progress, or already moved into the region) and mark them done when
//! their pages are in the region; the head advances over done positions,
//! so fills may finish in any order and several run at once (a mover and
//! faulting threads). Evictions take turns (`evict_turn`): one works on the
//! holes past the tail, which no fill looks at, and counts them as frames
//! (`filled`) only once their data is written back. So a thread that fills
//! never waits for a mover's write-back, nor for another fill. Application
//! threads only try for an eviction turn: a busy one sends them to the
//! classic path instead of making them wait for a mover.
//!
//! The ring's mapping is registered with the region's
//! userfaultfd (the kernel moves pages only into ranges registered with the
//! same descriptor), so a hole must never be touched: every access goes
//! through the positions the state says hold frames. The ring is populated
//! before registration for that reason.
//!
//! Frames in the ring are near memory: the ring's size is taken from the
//! region's budget.

use super::RegionCore;
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
    evict: Mutex<()>,
}

/// Where the frames are.
pub(crate) struct RingState {
    pub(crate) head: usize,
    pub(crate) frames: usize,
    /// Positions from the head taken by fills (in progress, or done and
    /// waiting for the head to pass them).
    pub(crate) reserved: usize,
    /// Per position: a fill moved its frame out (a hole the head has not
    /// passed yet).
    done: Box<[bool]>,
}

impl RingState {
    fn new(cap: usize) -> RingState {
        RingState {
            head: 0,
            frames: cap,
            reserved: 0,
            done: vec![false; cap].into_boxed_slice(),
        }
    }

    /// The contiguous frames no fill has taken, from the first one:
    /// (position, count).
    pub(crate) fn free_run(&self, cap: usize) -> (usize, usize) {
        let start = (self.head + self.reserved) % cap;
        (start, (self.frames - self.reserved).min(cap - start))
    }

    /// A fill takes the `n` frames `free_run` named first.
    pub(crate) fn reserve(&mut self, n: usize) {
        debug_assert!(self.reserved + n <= self.frames);
        self.reserved += n;
    }

    /// A fill is done with the `n` positions from `pos` it reserved: their
    /// frames are in the region (or given back to the kernel). The head
    /// passes every done position it reaches.
    pub(crate) fn release(&mut self, pos: usize, n: usize, cap: usize) {
        for j in 0..n {
            self.done[(pos + j) % cap] = true;
        }
        while self.reserved > 0 && self.done[self.head] {
            self.done[self.head] = false;
            self.head = (self.head + 1) % cap;
            self.frames -= 1;
            self.reserved -= 1;
        }
    }

    /// The first hole past the tail, and how many holes there are (they
    /// wrap around the ring).
    pub(crate) fn holes(&self, cap: usize) -> (usize, usize) {
        ((self.head + self.frames) % cap, cap - self.frames)
    }

    /// The newest frames no fill has taken, contiguous, at the end of the
    /// frames: (position, count). An eviction short of holes gives these
    /// back to the kernel.
    pub(crate) fn spare_run(&self, cap: usize) -> (usize, usize) {
        let spare = self.frames - self.reserved;
        let end = self.head + self.frames;
        if end <= cap {
            (end - spare, spare)
        } else {
            let n = spare.min(end - cap);
            (end - cap - n, n)
        }
    }

    /// `n` frames at the end of the frames (see `spare_run`) left.
    pub(crate) fn dropped(&mut self, n: usize) {
        debug_assert!(n <= self.frames - self.reserved);
        self.frames -= n;
    }

    /// `n` holes at the tail became frames.
    pub(crate) fn filled(&mut self, n: usize) {
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
            state: Mutex::new(RingState::new(pages)),
            evict: Mutex::new(()),
        })
    }

    /// Locks the ring's bookkeeping (briefly: no data moves under it).
    pub(crate) fn lock(&self) -> MutexGuard<'_, RingState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The turn of one eviction; with `wait` false, None if another has it.
    pub(crate) fn evict_turn(&self, wait: bool) -> Option<MutexGuard<'_, ()>> {
        if wait {
            return Some(self.evict.lock().unwrap_or_else(|p| p.into_inner()));
        }
        match self.evict.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

impl RegionCore {
    /// The frame ring when faulting threads recycle frames themselves: a
    /// ring (`install = move`) and no movers (with movers, they fill from
    /// the ring and faulting threads copy).
    pub(crate) fn sync_ring(&self) -> Option<&FrameRing> {
        self.ring.as_ref().filter(|_| self.movers.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_finish_in_any_order_and_the_head_follows() {
        let cap = 8;
        let mut s = RingState::new(cap);
        assert_eq!(s.free_run(cap), (0, 8));
        assert_eq!(s.holes(cap).1, 0);
        // Two fills: 0..3 and 3..5.
        s.reserve(3);
        assert_eq!(s.free_run(cap), (3, 5));
        s.reserve(2);
        // The second finishes first: no hole yet (the head waits at 0).
        s.release(3, 2, cap);
        assert_eq!((s.head, s.frames, s.reserved), (0, 8, 5));
        assert_eq!(s.holes(cap).1, 0);
        s.release(0, 3, cap);
        assert_eq!((s.head, s.frames, s.reserved), (5, 3, 0));
        assert_eq!(s.holes(cap), (0, 5));
        // An eviction fills 4 holes; a fill wraps past the end.
        s.filled(4);
        assert_eq!(s.free_run(cap), (5, 3));
        s.reserve(3);
        assert_eq!(s.free_run(cap), (0, 4));
        s.release(5, 3, cap);
        assert_eq!((s.head, s.frames), (0, 4));
        assert_eq!(s.holes(cap), (4, 4));
    }

    #[test]
    fn spare_frames_are_the_newest_and_never_reserved_ones() {
        let cap = 8;
        // Frames 2..7, a fill holding 2..4.
        let mut s = RingState::new(cap);
        s.reserve(2);
        s.release(0, 2, cap);
        s.dropped(1);
        s.reserve(2);
        assert_eq!((s.head, s.frames, s.reserved), (2, 5, 2));
        assert_eq!(s.spare_run(cap), (4, 3));
        s.dropped(3);
        assert_eq!(s.spare_run(cap), (4, 0));
        assert_eq!(s.holes(cap), (4, 6));
        // Wrapped: frames 6, 7, 0, 1, 2; a fill holds 6 and 7.
        let mut s = RingState::new(cap);
        s.reserve(6);
        s.release(0, 6, cap);
        s.filled(3);
        s.reserve(2);
        assert_eq!((s.head, s.frames, s.reserved), (6, 5, 2));
        assert_eq!(s.spare_run(cap), (0, 3));
        s.dropped(2);
        assert_eq!(s.spare_run(cap), (0, 1));
        s.release(6, 2, cap);
        assert_eq!((s.head, s.frames, s.reserved), (0, 1, 0));
        assert_eq!(s.spare_run(cap), (0, 1));
    }
}
