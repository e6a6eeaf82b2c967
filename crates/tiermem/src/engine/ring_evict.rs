//! Eviction into the frame ring (`install = move`, and `auto` while one
//! thread at a time faults): victims are moved out of the region, whose
//! atomic unmap needs no write protection, and written back from there.

use super::evict::{RunBufs, Unmaps};
use super::ring::FrameRing;
use super::RegionCore;
use crate::page::{PageState, PageWord};
use crate::stats::{Cost, FaultTimer};
use crate::store::StoreError;
use std::sync::atomic::Ordering;
use tiermem_sys::uffd::Resolved;

impl RegionCore {
    /// Evicts a run of contiguous owned pages by moving them into the frame
    /// ring (one UFFDIO_MOVE per contiguous piece: an atomic unmap, so dirty
    /// pages need no write protection first) and writing dirty ones back
    /// from there. Pages the kernel refuses to move (pinned) take the
    /// classic path. wp-fault only (see `FrameRing`).
    pub(super) fn evict_run_to_ring(
        &self,
        ring: &FrameRing,
        run: &[(usize, PageWord)],
        bufs: &mut RunBufs<'_>,
        unmaps: &mut Unmaps<'_>,
        timer: &mut FaultTimer,
    ) -> (usize, Option<StoreError>) {
        let ps = self.page_bytes;
        let n = run.len();
        let first = run[0].0;
        // One eviction at a time works on the ring's holes; an application
        // thread does not wait for a mover's turn (the classic path).
        self.retry_pinned();
        // The pin ring is waited for: the classic path could lose a page
        // the kernel has pinned (see `pinned`).
        let pin_ring = self.is_pin_ring(ring);
        let Some(turn) = ring.evict_turn(super::mover::on_mover() || pin_ring) else {
            return self.evict_run(run, bufs, unmaps, timer);
        };
        let (mut at, mut holes) = {
            let mut st = ring.lock();
            // Make room: give the newest frames back to the kernel when the
            // ring has fewer holes than the run needs (never those a fill is
            // working on).
            while ring.cap - st.frames < n {
                let (pos, spare) = st.spare_run(ring.cap);
                let release = spare.min(n - (ring.cap - st.frames));
                if release == 0 {
                    break;
                }
                if self
                    .uffd
                    .discard(&ring.reg, &ring.map, (pos + spare - release) * ps, release * ps)
                    .is_err()
                {
                    break;
                }
                st.dropped(release);
            }
            st.holes(ring.cap)
        };
        timer.lap(Cost::LockList);
        // Move the run out into the holes past the tail, in at most two
        // pieces (the ring wraps). No fill looks at holes, and they count
        // as frames only once written back (see `FrameRing`).
        let pos_of = &mut bufs.pos_of[..n];
        let mut moved = 0;
        // The kernel refused the page at `moved` as pinned (see `pinned`).
        let mut pinned = false;
        while moved < n && holes > 0 {
            let k = holes.min(ring.cap - at).min(n - moved);
            let mut done = 0;
            let mut emptied = 0;
            while done < k {
                let r = self.uffd.move_out(
                    &self.reg,
                    (first + moved + done) * ps,
                    &ring.reg,
                    (at + done) * ps,
                    (k - done) * ps,
                );
                match r {
                    Ok(Resolved::Done) => done = k,
                    Ok(Resolved::Partial { bytes }) if bytes > 0 => done += bytes / ps,
                    // A hole the kernel itself filled (`resolve_outside`):
                    // empty it and go on.
                    Ok(Resolved::AlreadyMapped) if emptied < k => {
                        emptied += 1;
                        if self
                            .uffd
                            .discard(&ring.reg, &ring.map, (at + done) * ps, ps)
                            .is_err()
                        {
                            break;
                        }
                    }
                    // EBUSY: pinned, or not known exclusive to this
                    // process: shared copy-on-write with a fork()ed child
                    // (pagemap's exclusive bit says so), or shared once
                    // (the kernel keeps it marked shared after the child
                    // has gone, until a write; pagemap cannot tell that
                    // from a pin). Held only in the pin ring, where another
                    // process is known to pin pages; elsewhere the classic
                    // path evicts it, as before.
                    Err(e) if e.errno().is_some_and(|e| e.raw() == libc::EBUSY) => {
                        let addr = self.mapping.addr() + (first + moved + done) * ps;
                        // Held wherever a pin ring exists (the process is
                        // known to have pinners), whichever ring this is.
                        pinned = self.pin_ring().is_some()
                            && tiermem_sys::pagemap::mapped_exclusively(addr) != Some(false);
                        break;
                    }
                    _ => break,
                }
            }
            self.stats.evict_calls.fetch_add(1, Ordering::Relaxed);
            if super::mover::on_mover() {
                self.stats.mover_unmap_calls.fetch_add(1, Ordering::Relaxed);
            }
            for j in 0..done {
                pos_of[moved + j] = at + j;
            }
            moved += done;
            at = (at + done) % ring.cap;
            holes -= done;
            if done < k {
                break;
            }
        }
        timer.lap(Cost::Tlb);
        // Which pages need writing back: the dirty ones, except those marked
        // VERIFY that turn out equal to their far copy (now unmapped, so the
        // comparison cannot race with a writer).
        let dirty = &mut bufs.dirty[..n];
        for k in 0..moved {
            let w = run[k].1;
            dirty[k] = w.state() == PageState::Dirty
                && !(w.verify() && self.unchanged(first + k, w, ring.map.range(pos_of[k] * ps, ps)));
        }
        // Write back dirty pages from their frames, contiguous ones together.
        let failed = &mut bufs.failed[..n];
        failed.iter_mut().for_each(|f| *f = false);
        let mut first_error = None;
        let mut s = 0;
        while s < moved {
            if !dirty[s] {
                s += 1;
                continue;
            }
            let mut e = s + 1;
            while e < moved && dirty[e] && pos_of[e] == pos_of[e - 1] + 1 {
                e += 1;
            }
            let src = ring.map.range(pos_of[s] * ps, (e - s) * ps);
            if let Err(err) = self.write_back(first + s, src) {
                // Put the data back in the region (a copy: the frames stay
                // in the ring): nothing is lost. A failing copy cannot
                // happen short of a kernel failure; the data still sits in
                // the frame, so keep trying rather than publish a loss.
                for k in s..e {
                    let src = ring.map.range(pos_of[k] * ps, ps);
                    while self.copy_run((first + k) * ps, src, tiermem_sys::uffd::CopyMode::default()) == 0 {
                        std::thread::yield_now();
                    }
                    failed[k] = true;
                }
                first_error.get_or_insert(err);
            }
            s = e;
        }
        // The frames hold data now (written back, or copied back into the
        // region after a failed write-back): fills may take them.
        ring.lock().filled(moved);
        timer.lap(Cost::Transfer);
        let evicted = failed[..moved].iter().filter(|&&f| !f).count();
        self.publish_eviction(&run[..moved], &dirty[..moved], &failed[..moved]);
        timer.lap(Cost::LockList);
        drop(turn);
        if pin_ring {
            self.drain_pin_ring(ring);
        }
        if moved < n && pinned {
            // Pinned by the kernel: unmapped now, the page would lose what
            // the pinning call writes into it. It stays, held (see `pinned`),
            // and the rest of the run goes on.
            let (p, w) = run[moved];
            self.pages.unlock(p, w);
            self.hold_pinned(p);
            if moved + 1 < n {
                let (more, err) = self.evict_run_to_ring(ring, &run[moved + 1..], bufs, unmaps, timer);
                return (evicted + more, first_error.or(err));
            }
        } else if moved < n && pin_ring && moved > 0 {
            // The pin ring ran out of holes (a run longer than the ring,
            // with the resident pages between victims): drained above, it
            // takes the rest too. The classic path could lose a page the
            // kernel pins.
            let (more, err) = self.evict_run_to_ring(ring, &run[moved..], bufs, unmaps, timer);
            return (evicted + more, first_error.or(err));
        } else if moved < n {
            // No room in the ring, or another refusal: classic path,
            // without the ring's eviction turn.
            let (more, err) = self.evict_run(&run[moved..], bufs, unmaps, timer);
            return (evicted + more, first_error.or(err));
        }
        (evicted, first_error)
    }
}
