//! Fill and install: reserving near slots, bringing data in, installing it (copy, THP, move ring).

use super::errors::{OP_EVICT, OP_INSTALL, OP_READ};
use super::progress::Keep;
use super::ring::FrameRing;
use super::{Outcome, RegionCore, Server};
use crate::config::{DirtyTracking, PageSize};
use crate::page::{PageState, PageWord};
use crate::stats::{Cost, FaultKind, FaultTimer};
use crate::store::{StagingPool, StagingSlot, StoreError};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tiermem_sys::uffd::{Resolved, UffdError};

/// What [`RegionCore::install_by_move`] did with a run.
#[derive(Default)]
pub(super) struct Moved {
    /// Leading pages of the run installed. The rest, if any, are left for
    /// UFFDIO_COPY (the ring ran short, or the kernel would not move), or
    /// failed to read.
    pub(super) done: usize,
    /// The far store failed to read the pages `done..end` (reported
    /// already): the caller must not read them again for this fill.
    pub(super) read_failed: Option<usize>,
}

impl Moved {
    /// The first page of the run the caller may still install by copying:
    /// past the pages moved in, and past those whose read failed.
    pub(super) fn resume_at(&self) -> usize {
        self.read_failed.unwrap_or(self.done)
    }
}

/// How long a fault keeps trying to free a near slot while every resident
/// page is busy before it gives up and fails the access.
const STUCK_LIMIT: Duration = Duration::from_secs(10);
/// How long it waits for pinned pages (a system call in progress) before
/// it stops sparing pages (see `reserve_slot`).
const PINNED_PATIENCE: Duration = Duration::from_millis(10);
/// Evictions tried again after every write-back of a batch failed (a
/// sequential batch is one write): a transient store error (EIO from a
/// network file system, fault injection) costs a short wait, not the
/// program. The waits grow fourfold from the first.
const STORE_RETRIES: u32 = 4;
const STORE_RETRY_WAIT: Duration = Duration::from_millis(1);

/// Why no near slot could be made free.
#[derive(Debug)]
pub(crate) enum NoRoom {
    /// Write-back failed for every victim.
    Store(StoreError),
    /// Every resident page stayed busy for too long.
    Stuck,
    /// A handler thread found every page it may evict spared for another
    /// thread's turn: the fault is served later (see `fill`).
    Later,
}

/// After an eviction whose write-backs all failed with `e`: waits before
/// the next try, or gives up with `e` (a full store at once: waiting
/// frees no space).
fn store_retry(failures: &mut u32, e: StoreError) -> Result<(), NoRoom> {
    if e.is_full() || *failures == STORE_RETRIES {
        return Err(NoRoom::Store(e));
    }
    tiermem_sys::thread::sleep(STORE_RETRY_WAIT * 4u32.pow(*failures));
    *failures += 1;
    Ok(())
}

impl RegionCore {
    /// Fills page `i` (owned, was `w`) for thread `tid` (`foreign`: another
    /// process's): reserves a near slot, brings the data in, installs the
    /// pte, publishes the state.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill(
        &self,
        i: usize,
        w: PageWord,
        write: bool,
        tid: u32,
        foreign: bool,
        server: Server,
        mut timer: FaultTimer,
    ) -> Outcome {
        self.faulting_threads.note(tid);
        if let Err(why) = self.reserve_slot(tid, foreign, server, &mut timer) {
            let errno = match &why {
                NoRoom::Store(e) => {
                    if e.is_full() {
                        self.say_store_full();
                    }
                    e.errno().map_or(0, |e| e.raw())
                }
                NoRoom::Stuck => 0,
                NoRoom::Later => {
                    // Waiting here would keep the handler thread from the
                    // faults of the thread whose turn it is: wake the
                    // faulting thread instead, it faults again.
                    self.pages.unlock(i, w);
                    let _ = self.uffd.wake(&self.reg, i * self.page_bytes, self.page_bytes);
                    self.stats.record_fault(FaultKind::Spurious, tid, timer);
                    return Outcome::Spurious;
                }
            };
            self.errors.record((i * self.page_bytes) as u64, OP_EVICT, errno);
            return self.poison(i, w, server);
        }
        let cluster = self.claim_around(i, w, tid);
        if cluster.len() > 1 {
            if let Some(done) = self.fill_cluster(&cluster, write, tid, server, &mut timer) {
                return done;
            }
        }
        if let Some(done) = self.fill_by_move(i, w, write, tid, server, &mut timer) {
            return done;
        }
        let off = i * self.page_bytes;
        // Handler threads let the ioctl wake the faulting thread: waking it
        // only after publishing the state would cost an extra ioctl and
        // still not order anything, because a faulting thread that has not
        // gone to sleep yet simply retries once the pte is there. The page
        // state and the statistics therefore lag the application by
        // microseconds in that design.
        let dont_wake = server == Server::InContext;
        // THP blocks are installed writable: write-protected small pages
        // cannot collapse. So is a page written during its last stay (the
        // rewrite hint), expecting the write again.
        let rewrite = !write && self.expects_rewrite(i, w);
        let wp_on_install = !write && !rewrite && !self.thp();
        // A read zero-fill in wp-fault mode maps the shared zero page and
        // then protects it; `raced` says that another thread wrote the page
        // in between (see `zero_fill_wp`).
        let mut raced = false;
        let (installed, kind) = match w.state() {
            PageState::Untouched => {
                // The shared zero page costs no memory, but only wp-async can
                // use it: its dirty tracking reads the pte at eviction, and a
                // write COWs the zero page into a "written" page. wp-fault
                // needs the page write-protected from the moment it is
                // mapped; ZEROPAGE followed by WRITEPROTECT leaves a window
                // in which another thread's write is a plain kernel COW,
                // invisible to us, and the page would later be dropped as
                // still zero (a lost write; see the stress test
                // `first_read_racing_a_first_write_loses_nothing`). A read
                // in wp-fault mode therefore maps the zero page, protects
                // it, and then looks at the page: a write in the window
                // left non-zero data there, and the page is published
                // Dirty (see `zero_fill_wp`). Writes, hugetlb (no ZEROPAGE
                // there) and handler threads (which need COPY's wake-up)
                // install a copy of zeros in one atomic UFFDIO_COPY.
                let zero_page =
                    !write && self.config.page_size == PageSize::Base4K && server == Server::InContext;
                let r = if zero_page && self.config.dirty_tracking == DirtyTracking::WpAsync {
                    self.retry_again(|| self.uffd.zeropage(&self.reg, off, self.page_bytes, dont_wake))
                } else if zero_page {
                    self.zero_fill_wp(off).map(|r| raced = r)
                } else if self.thp() {
                    self.install_thp(off, None, dont_wake)
                } else {
                    self.copy_in(
                        off,
                        self.zeros.range(0, self.page_bytes),
                        wp_on_install,
                        dont_wake,
                    )
                    .map_err(|short| short.err)
                };
                timer.lap(Cost::Pte);
                (r, FaultKind::ZeroFill)
            }
            PageState::Far => {
                let slot = self.staging.as_ref().map(StagingPool::claim);
                let fetched = self.store.fetch(off as u64, self.page_bytes, slot.as_ref());
                timer.lap(Cost::Transfer);
                match fetched {
                    Ok(src) => {
                        let r = if self.thp() {
                            self.install_thp(off, Some(src), dont_wake)
                        } else {
                            self.copy_in(off, src, wp_on_install, dont_wake)
                                .map_err(|short| short.err)
                        };
                        timer.lap(Cost::Pte);
                        self.stats
                            .bytes_in
                            .fetch_add(self.page_bytes as u64, Ordering::Relaxed);
                        (r, FaultKind::FarFill)
                    }
                    Err(e) => {
                        self.store_failed(off as u64, OP_READ, &e);
                        self.release_slots(1);
                        return self.poison(i, w, server);
                    }
                }
            }
            _ => unreachable!("fill of a resident page"),
        };
        if let Err(e) = installed {
            // Typically ENOMEM: the hugetlb pool ran dry.
            self.errors
                .record(off as u64, OP_INSTALL, e.errno().map_or(0, |e| e.raw()));
            self.release_slots(1);
            return self.poison(i, w, server);
        }
        let next = if rewrite {
            self.count_rewrites(1);
            PageWord::dirty_unverified(w.far_valid())
        } else {
            self.filled_state(write || raced, w)
        };
        self.publish_fill(i, next, kind, tid, timer)
    }

    /// The end of a demand fill of page `i`: lists the page with the
    /// policy (before publishing it, so an evictor that pops it finds it
    /// Busy and waits rather than missing it), records the fault (before
    /// publishing: a page that is no longer Busy has its fault counted,
    /// which Region::settle relies on), and publishes `next`.
    fn publish_fill(
        &self,
        i: usize,
        next: PageWord,
        kind: FaultKind,
        tid: u32,
        mut timer: FaultTimer,
    ) -> Outcome {
        self.policy().on_fill(i);
        timer.lap(Cost::LockList);
        self.stats.record_fault(kind, tid, timer);
        self.pages.unlock(i, next);
        Outcome::Resolved
    }

    /// `fill` by frame recycling, for a far page or a write to an untouched
    /// one (a read of an untouched page maps the shared zero page, which
    /// costs no frame). None: no ring, or the move failed; `fill` goes on
    /// the classic way.
    fn fill_by_move(
        &self,
        i: usize,
        w: PageWord,
        write: bool,
        tid: u32,
        server: Server,
        timer: &mut FaultTimer,
    ) -> Option<Outcome> {
        let ring = self.sync_ring()?;
        let far = w.state() == PageState::Far;
        if !far && !write {
            return None;
        }
        let moved = self.install_by_move(ring, &[(i, w)], timer);
        if moved.read_failed.is_some() {
            self.release_slots(1);
            return Some(self.poison(i, w, server));
        }
        if moved.done != 1 {
            return None;
        }
        // Moved in writable: a read leaves it dirty until eviction finds
        // it unchanged.
        let next = if write {
            PageWord::new(PageState::Dirty, w.far_valid())
        } else {
            PageWord::dirty_unverified(w.far_valid())
        };
        let kind = if far {
            FaultKind::FarFill
        } else {
            FaultKind::ZeroFill
        };
        let timer = std::mem::replace(timer, FaultTimer::start());
        Some(self.publish_fill(i, next, kind, tid, timer))
    }

    /// wp-fault read zero-fill at the cost of UFFDIO_ZEROPAGE (the shared
    /// zero page, no allocation, no copy) instead of a UFFDIO_COPY of zeros
    /// with MODE_WP. UFFDIO_ZEROPAGE cannot map the page write-protected
    /// (it takes no MODE_WP, and refuses a pte that carries a wp marker:
    /// EEXIST), so the page is protected by a second call, and another
    /// thread can write it in between: the kernel COWs the zero page
    /// without telling us (the pte has no uffd-wp bit yet). Once protected,
    /// no write can land unseen (UFFDIO_WRITEPROTECT flushes every CPU's
    /// TLB before it returns), so the page's contents decide: all zeros,
    /// and it is a clean zero page whatever happened (a write of zeros
    /// loses nothing); anything else was written in the window, and the
    /// page is published Dirty and unprotected (a protected Dirty page
    /// would fail kernel-mode writes with EFAULT). Returns whether a write
    /// raced. A failed protection also publishes the page Dirty: it is
    /// then written back at eviction whatever it holds.
    fn zero_fill_wp(&self, off: usize) -> Result<bool, UffdError> {
        let ps = self.page_bytes;
        self.retry_again(|| self.uffd.zeropage(&self.reg, off, ps, true))?;
        if self.uffd.writeprotect(&self.reg, off, ps, true, false).is_err() {
            return Ok(true);
        }
        if self.mapping.range(off, ps).is_zero() {
            return Ok(false);
        }
        self.stats.zero_fill_races.fetch_add(1, Ordering::Relaxed);
        let _ = self.uffd.writeprotect(&self.reg, off, ps, false, true);
        Ok(true)
    }

    /// The state of a page just filled for a read or a write. A THP block
    /// is mapped writable, so it counts as dirty until eviction finds it
    /// still equal to its far copy (VERIFY).
    fn filled_state(&self, write: bool, w: PageWord) -> PageWord {
        if write {
            PageWord::new(PageState::Dirty, w.far_valid())
        } else if self.thp() {
            PageWord::dirty_unverified(w.far_valid())
        } else {
            PageWord::new(PageState::Clean, w.far_valid())
        }
    }

    /// Installs one THP block at region offset `off` with the contents of
    /// `src` (zeros for None): moved in whole when the kernel allows it,
    /// else 512 small pages copied and collapsed.
    fn install_thp(
        &self,
        off: usize,
        src: Option<tiermem_sys::mm::MemRange<'_>>,
        dont_wake: bool,
    ) -> Result<(), UffdError> {
        let data = src.unwrap_or(self.zeros.range(0, self.page_bytes));
        let moved = match &self.thp_staging {
            Some(pool) => self.move_thp(pool, off, src),
            None => 0,
        };
        if moved == self.page_bytes {
            return Ok(());
        }
        match self.copy_in(
            off + moved,
            data.sub(moved, self.page_bytes - moved),
            false,
            dont_wake,
        ) {
            Ok(()) => {
                if moved == 0 {
                    self.collapse(off, 1);
                }
                Ok(())
            }
            Err(short) => {
                // All of the block missing again, as its word says.
                self.drop_part_of_block(off, moved + short.done);
                Err(short.err)
            }
        }
    }

    /// The fast path of [`Self::install_thp`]: builds the block in a staging
    /// buffer advised for huge pages and moves it in whole (`UFFDIO_MOVE`
    /// of one PMD: no copy into the region, no collapse). Returns the bytes
    /// moved: the whole block, part of it (the buffer got small pages), or
    /// nothing (the block's range still has a page table from small pages:
    /// EEXIST).
    fn move_thp(&self, pool: &StagingPool, off: usize, src: Option<tiermem_sys::mm::MemRange<'_>>) -> usize {
        let slot = pool.claim();
        let (buf, at) = (slot.mapping(), slot.offset());
        let bit = 1u64 << (at / self.page_bytes);
        // Populating allocates a zeroed huge page (small pages if none is
        // free). A buffer whose page was not moved away still holds old data.
        if buf.populate_write(at, self.page_bytes).is_err() {
            return 0;
        }
        match src {
            Some(src) => buf.copy_in(at, src),
            None if self.thp_stale.load(Ordering::Relaxed) & bit != 0 => buf.fill(at, self.page_bytes, 0),
            None => {}
        }
        let mut done = 0;
        while done < self.page_bytes {
            match self.uffd.move_in(
                &self.reg,
                off + done,
                buf,
                at + done,
                self.page_bytes - done,
                false,
            ) {
                Ok(Resolved::Done) => done = self.page_bytes,
                Ok(Resolved::Partial { bytes }) if bytes > 0 => done += bytes,
                // Refused, or no progress: the rest is copied.
                _ => break,
            }
        }
        if done == self.page_bytes {
            self.thp_stale.fetch_and(!bit, Ordering::Relaxed);
            self.stats.thp_moves.fetch_add(1, Ordering::Relaxed);
        } else {
            self.thp_stale.fetch_or(bit, Ordering::Relaxed);
        }
        done
    }

    /// Collapses the `n` freshly filled THP blocks from region offset `off`
    /// into huge pages. A block the kernel cannot collapse (no free huge
    /// page) keeps its small pages: correct, only slower to translate.
    fn collapse(&self, off: usize, n: usize) {
        for k in 0..n {
            let ok = self
                .mapping
                .advise(
                    off + k * self.page_bytes,
                    self.page_bytes,
                    tiermem_sys::mm::Advice::Collapse,
                )
                .is_ok();
            let counter = if ok {
                &self.stats.thp_collapses
            } else {
                &self.stats.thp_collapse_failures
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes one near slot, evicting a batch first if the budget is full.
    fn reserve_slot(
        &self,
        tid: u32,
        foreign: bool,
        server: Server,
        timer: &mut FaultTimer,
    ) -> Result<(), NoRoom> {
        // The thread's own last fills stay: they may be the other pages of
        // the instruction that faults (see `progress`). Not for another
        // process's thread: it faults from a system call that pins each
        // page as it comes (`pinned`), so it needs no pages kept, and its
        // last fills are pinned: kept, they hid from this eviction the
        // very pages it would find pinned and hold outside the budget. At
        // a four-page budget such faults found nothing they could evict
        // and waited about 10 ms each: two Open MPI ranks exchanging 4 x
        // 16 MiB by CMA took over two minutes (4 s with this).
        let keep = if foreign { Keep::Turn } else { Keep::Thread(tid) };
        let mut stuck_since: Option<Instant> = None;
        let mut store_failures = 0;
        loop {
            if self.take_slots(1) == 1 {
                if let Some(m) = &self.movers {
                    if self.free_slots() < m.low_free && !m.eviction_paused() {
                        m.wake();
                    }
                }
                return Ok(());
            }
            if let Some(m) = self.movers.as_ref().filter(|m| !m.eviction_paused()) {
                m.wake();
            }
            match self.evict_batch(self.fault_batch(), keep, timer) {
                Ok(n) if n > 0 => {
                    stuck_since = None;
                    self.stats.inline_evictions.fetch_add(n as u64, Ordering::Relaxed);
                }
                Ok(_) if self.evict_elsewhere(keep, None, timer) > 0 => stuck_since = None,
                Ok(_) if server == Server::HandlerThread && self.slots.budget.progress.turn_of_other(tid) => {
                    return Err(NoRoom::Later);
                }
                Ok(_) => {
                    // Every resident page is being filled by another thread
                    // right now, or spared for another thread's turn: let
                    // them finish (a turn held too long ends here).
                    self.slots.budget.progress.stuck(keep);
                    let t0 = *stuck_since.get_or_insert_with(Instant::now);
                    let own_pins = crate::fault::holds_call_pins(tid);
                    if self.slots.budget.has_pins() && (own_pins || t0.elapsed() > PINNED_PATIENCE) {
                        // Or pinned for system calls (half the budget at
                        // most) while the rest is spared: with four pages,
                        // two pinned and this thread's last fills leave
                        // none, and the calls may be this thread's own
                        // (then at once: waiting for them is waiting for
                        // nothing; rsync at 16K paid 10 ms per read piece).
                        // Sparing is for progress, not correctness: take
                        // one page, spared or not.
                        let own = match self.evict_batch(1, Keep::Nothing, timer) {
                            Ok(n) => n,
                            Err(e) => {
                                store_retry(&mut store_failures, e)?;
                                continue;
                            }
                        };
                        self.stats
                            .inline_evictions
                            .fetch_add(own as u64, Ordering::Relaxed);
                        if own > 0 || self.evict_elsewhere(Keep::Nothing, Some(1), timer) > 0 {
                            stuck_since = None;
                        }
                    }
                    if t0.elapsed() > STUCK_LIMIT {
                        return Err(NoRoom::Stuck);
                    }
                    std::thread::yield_now();
                }
                Err(e) => store_retry(&mut store_failures, e)?,
            }
        }
    }

    /// With a shared budget, evicts a batch of another region's pages (or
    /// `pages` of them) when this one has none to give. Returns pages
    /// evicted.
    pub(super) fn evict_elsewhere(&self, keep: Keep, pages: Option<usize>, timer: &mut FaultTimer) -> usize {
        for other in self.slots.budget.others(self) {
            let want = pages.unwrap_or_else(|| other.fault_batch());
            if let Ok(n) = other.evict_batch(want, keep, timer) {
                if n > 0 {
                    other
                        .stats
                        .inline_evictions
                        .fetch_add(n as u64, Ordering::Relaxed);
                    return n;
                }
            }
        }
        0
    }

    /// Fill by frame recycling: copies the data of a run of owned pages
    /// into ring frames and moves them into place. Several threads may fill
    /// from the ring at once (see `FrameRing`).
    pub(super) fn install_by_move(
        &self,
        ring: &FrameRing,
        run: &[(usize, PageWord)],
        timer: &mut FaultTimer,
    ) -> Moved {
        let ps = self.page_bytes;
        let (pos, reserved) = {
            let mut st = ring.lock();
            let (pos, avail) = st.free_run(ring.cap);
            let k = avail.min(run.len());
            st.reserve(k);
            (pos, k)
        };
        let mut k = reserved;
        let mut read_failed = None;
        timer.lap(Cost::LockList);
        // Bring the data into the frames.
        let mut s = 0;
        while s < k {
            let far = run[s].1.state() == PageState::Far;
            let mut e = s + 1;
            while e < k && (run[e].1.state() == PageState::Far) == far {
                e += 1;
            }
            if far {
                let off = (run[s].0 * ps) as u64;
                if let Err(err) = self.store.read_into(off, (e - s) * ps, &ring.map, (pos + s) * ps) {
                    self.store_failed(off, OP_READ, &err);
                    read_failed = Some(e);
                    k = s;
                    break;
                }
                self.stats
                    .bytes_in
                    .fetch_add(((e - s) * ps) as u64, Ordering::Relaxed);
            } else {
                ring.map.fill((pos + s) * ps, (e - s) * ps, 0);
            }
            s = e;
        }
        timer.lap(Cost::Transfer);
        // Move the frames into the region.
        let dst = run[0].0 * ps;
        let mut done = 0;
        while done < k {
            match self.uffd.move_in(
                &self.reg,
                dst + done * ps,
                &ring.map,
                (pos + done) * ps,
                (k - done) * ps,
                false,
            ) {
                Ok(Resolved::Done) => done = k,
                Ok(Resolved::Partial { bytes }) if bytes > 0 => done += bytes / ps,
                _ => break,
            }
        }
        if done < reserved {
            // Frames the kernel would not move: give them back to the
            // kernel, so that their positions are holes like the others.
            // Should that fail too, an eviction's move into them fails
            // later and takes the classic path.
            let _ = self
                .uffd
                .discard(&ring.reg, &ring.map, (pos + done) * ps, (reserved - done) * ps);
        }
        ring.lock().release(pos, reserved, ring.cap);
        self.stats
            .recycled_installs
            .fetch_add(done as u64, Ordering::Relaxed);
        // Moved pages are writable and cannot be installed write-protected;
        // protecting them afterwards would leave a window in which a write
        // goes unseen. The caller marks read-stream pages Dirty + VERIFY
        // instead: eviction compares them with their far copy.
        timer.lap(Cost::Pte);
        Moved {
            done,
            read_failed: read_failed.filter(|_| done == k),
        }
    }

    /// Installs a run of owned, consecutive, non-resident pages, for which
    /// the caller reserved a near slot each, with as few install calls as
    /// possible. Pages it cannot fill are handed back unchanged (with their
    /// slots). Returns pages installed.
    pub(super) fn install_run(
        &self,
        run: &[(usize, PageWord)],
        ok: &mut [bool],
        write: bool,
        prefetch: bool,
        staging: Option<&StagingSlot<'_>>,
        timer: &mut FaultTimer,
    ) -> usize {
        let ok = &mut ok[..run.len()];
        ok.iter_mut().for_each(|x| *x = false);
        let moved = self
            .ring
            .as_ref()
            .map(|ring| self.install_by_move(ring, run, timer))
            .unwrap_or_default();
        let by_move = moved.done;
        ok[..by_move].iter_mut().for_each(|x| *x = true);
        // Pages whose read failed stay far (a demand fault tries again).
        let mut s = moved.resume_at();
        // Pages a read installs writable (see `rewrite`).
        let rewrite = |k: usize| !write && self.expects_rewrite(run[k].0, run[k].1);
        while s < run.len() {
            // A sub-run of pages of the same kind (all far, or all
            // untouched) and install mode.
            let far = run[s].1.state() == PageState::Far;
            let hinted = rewrite(s);
            let writable = write || hinted;
            let mut e = s + 1;
            while e < run.len() && (run[e].1.state() == PageState::Far) == far && rewrite(e) == hinted {
                e += 1;
            }
            let off = run[s].0 * self.page_bytes;
            let len = (e - s) * self.page_bytes;
            let mode = tiermem_sys::uffd::CopyMode {
                write_protect: !writable && !self.thp(),
                dont_wake: false,
            };
            // Pages installed from `s`: the pages after a failed one are
            // handed back with it.
            let installed = if far {
                let src = self.store.fetch(off as u64, len, staging);
                timer.lap(Cost::Transfer);
                match src {
                    Ok(src) => self.copy_run(off, src, mode),
                    Err(err) => {
                        // A prefetch is a hint: leave the pages in the far
                        // store; a demand fault will try again and report.
                        self.store_failed(off as u64, OP_READ, &err);
                        0
                    }
                }
            } else {
                self.copy_run(off, self.zeros.range(0, len), mode)
            };
            if installed > 0 && self.thp() {
                self.collapse(off, installed);
            }
            timer.lap(Cost::Pte);
            ok[s..s + installed].iter_mut().for_each(|x| *x = true);
            if far {
                self.stats
                    .bytes_in
                    .fetch_add((installed * self.page_bytes) as u64, Ordering::Relaxed);
            }
            s = e;
        }
        let mut installed = 0;
        {
            let mut policy = self.policy();
            for (k, &(p, _)) in run.iter().enumerate() {
                if ok[k] {
                    policy.on_fill(p);
                }
            }
        }
        for (k, &(p, w)) in run.iter().enumerate() {
            if ok[k] {
                let mut next = if !write && k < by_move {
                    // Moved in writable: dirty until proven otherwise.
                    // (Protecting the run and comparing it right away saves
                    // eviction's compare but costs one more TLB shootdown
                    // per run; it showed no clear gain: docs/movers.md.)
                    PageWord::dirty_unverified(w.far_valid())
                } else if rewrite(k) {
                    self.count_rewrites(1);
                    PageWord::dirty_unverified(w.far_valid())
                } else {
                    self.filled_state(write, w)
                };
                if prefetch {
                    next = next.with_prefetched();
                }
                self.pages.unlock(p, next);
                installed += 1;
            } else {
                self.release_slots(1);
                self.pages.unlock(p, w);
            }
        }
        timer.lap(Cost::LockList);
        installed
    }
}
