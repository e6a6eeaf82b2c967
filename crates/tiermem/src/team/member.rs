//! One process's membership in a team: its own userfaultfd on the shared
//! region, and the fault and eviction paths that run in its SIGBUS handler.
//!
//! Per-worker page tables come from the kernel: every member maps the same
//! shmem file, a MISSING fault (page in no one's near memory) is filled
//! with `UFFDIO_COPY`/`ZEROPAGE`, which maps it in the faulting process
//! only, and a MINOR fault (page near, but not mapped here) is resolved
//! with `UFFDIO_CONTINUE`. So each process has translations only for pages
//! it touched, and the page word's sharer mask records which members those
//! are. Eviction punches the page out of the file: the kernel's reverse
//! map unmaps it from exactly the processes that map it, and flushes TLBs
//! only on the CPUs where those processes run.
//!
//! Dirty tracking (where the team asks for it and the kernel can write
//! protect shared memory): a read fault installs its pages
//! write-protected, and a page's word carries [`DIRTY`] once any member
//! maps it writable (a write fault, a zero fill, a write to a protected
//! page). Eviction punches clean pages without writing them back: their
//! far copy is current. The engine's rule for its own installs.

use super::ctl::{self, Ctl, Stat, Where, BUSY, H_ABORT, H_BATCH, H_BUDGET, H_LOCK, H_READAHEAD};
use super::ctl::{DIRTY, H_AROUND, H_DIRTY, H_RESIDENT, H_RING_TAIL};
use crate::engine::locality::FaultAround;
use crate::fault::{Fault, FaultHandler, RangeGuard, Served, Signal};
use crate::party::EXIT_ABORTED;
use crate::stats::{Cost, FaultTimer};
use evict::{Window, WindowScratch};
use std::cell::Cell;
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tiermem_sys::mm::{MapOptions, Mapping, UserAccess};
use tiermem_sys::process;
use tiermem_sys::signal::Disposition;
use tiermem_sys::splice::Pipe;
use tiermem_sys::uffd::{
    CopyMode, Features, Ioctls, RegisterMode, Registration, Resolved, Uffd, UffdOptions,
};

mod evict;

/// Victims examined at most per eviction (stack buffers, no allocation).
pub(crate) const MAX_WINDOW: usize = 512;

/// What every member process maps: the control block, the region file
/// (near memory, at the same address everywhere) and the far file.
pub(crate) struct View {
    pub(crate) ctl_map: Mapping,
    pub(crate) ctl_user: UserAccess,
    pub(crate) data: File,
    pub(crate) data_map: Mapping,
    pub(crate) far: File,
    pub(crate) far_map: Mapping,
    /// Write-backs read the pipe into `far_map` where the far file cannot
    /// run out of space (a memfd), and splice into `far` where it can (a
    /// file of a sized tmpfs, /dev/shm: ENOSPC, the path the full-file
    /// test takes). Either stops short on a failure (a read into a mapping
    /// whose page cannot be allocated returns EFAULT part-way) and hands
    /// the rest back (`put_back`).
    pub(crate) far_in_place: bool,
    pub(crate) page: usize,
    pub(crate) npages: usize,
}

impl View {
    /// Maps the region file (at `at`, or where the kernel likes) and the
    /// far file beside a mapped control block.
    pub(crate) fn map(
        ctl_map: Mapping,
        ctl_user: UserAccess,
        data: File,
        far: File,
        npages: usize,
        at: Option<usize>,
    ) -> Result<(View, UserAccess), tiermem_sys::mm::MmError> {
        let page = tiermem_sys::mm::base_page_size();
        let len = npages * page;
        let (data_map, data_user) = match at {
            Some(addr) => Mapping::shared_at(data.as_fd(), 0, len, page, addr)?,
            None => Mapping::shared(data.as_fd(), 0, len, page, &MapOptions::default())?,
        };
        // Evictions unmap pages from every member's mapping: the kernel
        // marks the young ones accessed on the page cache's LRU, an
        // activation per page for nothing (tiermem replaces them), unless
        // the mapping is MADV_RANDOM (Linux 6.3: `vma_has_recency`). That
        // also stops file readahead, which userfaultfd ranges do not do
        // anyway, and makes the kernel's reclaim ignore the mapping's
        // accessed bits: under memory pressure of the host it may swap
        // hot team pages out as readily as cold ones (tiermem's budget is
        // meant to fit in memory). A hint: if it fails, evictions only
        // cost more.
        let _ = data_map.advise(0, len, tiermem_sys::mm::Advice::Random);
        let (far_map, _) = Mapping::shared(far.as_fd(), 0, len, page, &MapOptions::default())?;
        let far_in_place = tiermem_sys::memfd::unbounded_memory(far.as_fd());
        let view = View {
            ctl_map,
            ctl_user,
            data,
            data_map,
            far,
            far_map,
            far_in_place,
            page,
            npages,
        };
        Ok((view, data_user))
    }

    pub(crate) fn ctl(&self) -> Ctl<'_> {
        Ctl::new(self.ctl_map.user_atomics(&self.ctl_user))
    }
}

/// A pipe and a bounce buffer for one rank's evictions, with a lock in case
/// two threads share a rank.
struct Lane {
    busy: AtomicBool,
    pipe: Pipe,
    bounce: Mapping,
}

/// A fault being resolved: page `i`, locked by thread `tid` of `rank`
/// (its word was `w` before), and whether the access is a write.
#[derive(Clone, Copy)]
struct LockedFault {
    i: usize,
    w: u64,
    rank: usize,
    tid: u32,
    write: bool,
}

/// This process's membership.
pub(crate) struct Member {
    pub(crate) view: Arc<View>,
    uffd: Uffd,
    reg: Registration,
    /// Rank of this process's threads unless a thread set its own.
    pub(crate) rank: usize,
    /// The team's creator (not a forked worker): never exits on abort.
    pub(crate) host: bool,
    /// Lanes by rank (host: every rank, for threads mode) or one lane.
    lanes: Vec<Lane>,
    /// The view's registration with the fault router, until `leave`.
    routed: Mutex<Option<RangeGuard>>,
    /// Eviction windows, preallocated (kept off the faulting thread's
    /// stack; never allocated in the fault handler).
    scratch: Box<[Mutex<WindowScratch>]>,
    /// Fault-around's history and counters for this member's threads
    /// (None: the team has fault-around off).
    around: Option<FaultAround>,
    /// Victims of this member's next eviction when more than the team's
    /// batch (0: the batch): grown while victims come in long runs, by the
    /// engine's rule (`GROW_FROM`, `GROW_FACTOR`, `LONG_RUN`): one punch
    /// then covers a longer run.
    grown: AtomicUsize,
    /// The team tracks dirty pages (`H_DIRTY`): read faults install
    /// write-protected.
    track_dirty: bool,
    /// `UFFDIO_CONTINUE` takes `MODE_WP` (Linux 6.5); cleared at its first
    /// EINVAL, after which minor faults map writable (and dirty).
    continue_wp: AtomicBool,
}

/// Whether this kernel write-protects shared memory for userfaultfd
/// (Linux 5.19): what a team's dirty tracking needs.
pub(crate) fn shmem_write_protect() -> bool {
    Uffd::open(&UffdOptions {
        required: Features::SIGBUS | Features::WP_HUGETLBFS_SHMEM,
        optional: Features::empty(),
        nonblocking: false,
    })
    .is_ok()
}

thread_local! {
    static THREAD_RANK: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Makes the calling thread act as team rank `rank` in faults (threads
/// mode: each application thread is a worker of one process).
pub fn set_thread_rank(rank: usize) {
    THREAD_RANK.with(|r| r.set(rank));
}

fn thread_rank() -> Option<usize> {
    let r = THREAD_RANK.with(|r| r.get());
    (r != usize::MAX).then_some(r)
}

impl Member {
    /// Joins this process as `rank`: opens a userfaultfd, registers the
    /// region for MISSING and MINOR faults, and enters the registry.
    pub(crate) fn join(
        view: Arc<View>,
        rank: usize,
        host: bool,
        lanes: usize,
    ) -> Result<Arc<Member>, crate::Error> {
        let ctl = view.ctl();
        // The creator checked that the kernel can (see `TeamRegion::create`).
        let track_dirty = ctl.get(H_DIRTY) != 0;
        let (wp_feature, wp_mode) = if track_dirty {
            (Features::WP_HUGETLBFS_SHMEM, RegisterMode::WP)
        } else {
            (Features::empty(), RegisterMode::empty())
        };
        let uffd = Uffd::open(&UffdOptions {
            required: Features::SIGBUS | Features::MISSING_SHMEM | Features::MINOR_SHMEM | wp_feature,
            optional: Features::empty(),
            nonblocking: false,
        })?;
        let reg = uffd.register(
            &view.data_map,
            RegisterMode::MISSING | RegisterMode::MINOR | wp_mode,
        )?;
        if !reg.ioctls().contains(Ioctls::ZEROPAGE | Ioctls::CONTINUE) {
            return Err(crate::Error::Usage(
                "this kernel offers no UFFDIO_ZEROPAGE/UFFDIO_CONTINUE on shared memory: team regions need Linux 5.14 or newer"
                    .into(),
            ));
        }
        if track_dirty && !reg.ioctls().contains(Ioctls::WRITEPROTECT) {
            return Err(crate::Error::Usage(
                "this kernel offers no UFFDIO_WRITEPROTECT on shared memory: turn the team's dirty tracking off".into(),
            ));
        }
        let batch = ctl.get(H_BATCH).max(ctl.get(H_READAHEAD)) as usize;
        let mut v = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            let pipe = Pipe::new(batch * view.page).map_err(|errno| crate::Error::Sys {
                what: "creating the eviction pipe (see /proc/sys/fs/pipe-max-size)",
                errno,
            })?;
            let (bounce, _) = Mapping::anonymous(pipe.capacity().max(view.page), &MapOptions::default())?;
            v.push(Lane {
                busy: AtomicBool::new(false),
                pipe,
                bounce,
            });
        }
        let around = if ctl.get(H_AROUND) != 0 {
            Some(FaultAround::new(view.npages, false)?)
        } else {
            None
        };
        ctl.pid(rank)
            .store(tiermem_sys::thread::getpid() as u64, Ordering::Release);
        let m = Arc::new(Member {
            view,
            uffd,
            reg,
            rank,
            host,
            scratch: (0..lanes.max(1) + 1)
                .map(|_| Mutex::new(Box::new(Window::new())))
                .collect(),
            lanes: v,
            routed: Mutex::new(None),
            around,
            grown: AtomicUsize::new(0),
            track_dirty,
            continue_wp: AtomicBool::new(true),
        });
        let guard = crate::fault::register(m.view.data_map.addr(), m.view.data_map.len(), m.clone())?;
        *m.routed.lock().unwrap_or_else(|p| p.into_inner()) = Some(guard);
        Ok(m)
    }

    /// Unregisters the view and waits for in-flight fault handlers.
    pub(crate) fn leave(m: &Arc<Member>) {
        let guard = m.routed.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(guard);
    }

    fn lane(&self, rank: usize) -> &Lane {
        let l = &self.lanes[rank.min(self.lanes.len() - 1)];
        let mut spins = 0u32;
        while l
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            backoff(&mut spins);
        }
        l
    }

    fn resolve(&self, addr: usize, tid: u32, write: bool) -> Disposition {
        let ctl = self.view.ctl();
        let ps = self.view.page;
        let i = (addr - self.view.data_map.addr()) / ps;
        let rank = thread_rank().unwrap_or(self.rank);
        let mut timer = FaultTimer::start();
        let mut spins = 0u32;
        loop {
            let w = ctl.page(i).load(Ordering::Acquire);
            if w & BUSY != 0 {
                if !self.wait_busy(&ctl, i, w, &mut spins) {
                    return Disposition::Forward;
                }
                continue;
            }
            let at = ctl::where_(w);
            if at == Where::Lost {
                return Disposition::Forward;
            }
            if ctl
                .page(i)
                .compare_exchange(w, ctl::busy_by(w, rank), Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            timer.lap(Cost::LockList);
            let mapped_here = w & ctl::sharer_bit(rank) != 0;
            let f = LockedFault {
                i,
                w,
                rank,
                tid,
                write,
            };
            let ok = if at == Where::Resident && write && self.track_dirty && mapped_here {
                self.unprotect(&ctl, f, &mut timer)
            } else if at == Where::Resident {
                self.map_resident(&ctl, f, &mut timer)
            } else {
                self.fill(&ctl, f, &mut timer)
            };
            let (total, split) = timer.finish();
            for (k, ns) in split.iter().enumerate() {
                ctl.stat_at(rank, Stat::CostBase as usize + k)
                    .fetch_add(*ns, Ordering::Relaxed);
            }
            ctl.add(rank, Stat::FaultNs, total);
            return if ok {
                Disposition::Retry
            } else {
                Disposition::Forward
            };
        }
    }

    /// The cluster a demand fault of thread `tid` on page `i` calls for
    /// (the engine's fault-around decisions, this member's own history):
    /// the aligned window `[lo, hi)` around it, or None for the page alone.
    /// `wp`: a write-protect fault, on a page already near.
    fn around_window(
        &self,
        ctl: &Ctl<'_>,
        i: usize,
        (rank, tid, wp): (usize, u32, bool),
    ) -> Option<(usize, usize)> {
        let fa = self.around.as_ref()?;
        if wp {
            // A write-protect fault: the page is near, not refilled, and the
            // write shows it used (as in the engine).
            fa.written(i);
        } else if fa.refilled(i) {
            ctl.add(rank, Stat::AroundUnused, 1);
        }
        fa.adapt(self.lanes.len() > 1);
        let (n, used) = fa.window_counting(tid, i);
        ctl.add(rank, Stat::AroundUsed, used);
        let n = n.min(fa.cap());
        if n < 2 {
            return None;
        }
        let lo = i & !(n - 1);
        Some((lo, (lo + n).min(self.view.npages)))
    }

    /// Locks pages from `at` on, one way (`up`), while `fits` their words
    /// and the window `[lo, hi)` lasts; returns the bound reached (`up`:
    /// the first page not taken; else the last page taken). Never waits:
    /// a busy page ends the run.
    fn lock_run(
        &self,
        ctl: &Ctl<'_>,
        rank: usize,
        (at, up): (usize, bool),
        (lo, hi): (usize, usize),
        fits: impl Fn(u64) -> bool,
    ) -> usize {
        let mut p = at;
        loop {
            let next = if up {
                if p >= hi {
                    return p;
                }
                p
            } else {
                if p <= lo {
                    return p;
                }
                p - 1
            };
            let w = ctl.page(next).load(Ordering::Acquire);
            if w & BUSY != 0
                || !fits(w)
                || ctl
                    .page(next)
                    .compare_exchange(w, ctl::busy_by(w, rank), Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                return p;
            }
            p = if up { p + 1 } else { p - 1 };
        }
    }

    /// The near neighbours of page `i` (locked by the caller) that
    /// fault-around calls for and `fits` accepts, locked: `[first, end)`
    /// around `i`, or `i` alone. `fault`: the rank, thread and whether it
    /// is a write-protect fault (see [`Member::around_window`]).
    fn lock_near_cluster(
        &self,
        ctl: &Ctl<'_>,
        i: usize,
        fault: (usize, u32, bool),
        fits: impl Fn(u64) -> bool,
    ) -> (usize, usize) {
        let rank = fault.0;
        let Some(win) = self.around_window(ctl, i, fault) else {
            return (i, i + 1);
        };
        let fits = |w: u64| ctl::where_(w) == Where::Resident && fits(w);
        let end = self.lock_run(ctl, rank, (i + 1, true), win, fits);
        let first = self.lock_run(ctl, rank, (i, false), win, fits);
        (first, end)
    }

    /// Records the neighbours of a cluster that were installed.
    fn note_cluster(
        &self,
        ctl: &Ctl<'_>,
        rank: usize,
        tid: u32,
        (first, end): (usize, usize),
        done: impl Iterator<Item = usize>,
    ) {
        if let Some(fa) = &self.around {
            let mut n = 0;
            fa.installed_cluster(tid, first, end, done.inspect(|_| n += 1));
            if n > 0 {
                ctl.add(rank, Stat::AroundClusters, 1);
                ctl.add(rank, Stat::AroundInstalled, n);
            }
        }
    }

    /// A write to a page this member maps write-protected: the page is
    /// dirty from now on, and writable here (other members keep their
    /// protected mappings until they write too), with the neighbours this
    /// member maps that fault-around calls for: a sweep that reads, then
    /// writes, takes one such fault per cluster, as the engine's write
    /// faults install their clusters writable. The page is mapped again if
    /// the kernel dropped the mapping meanwhile.
    fn unprotect(&self, ctl: &Ctl<'_>, f: LockedFault, timer: &mut FaultTimer) -> bool {
        let (i, w, rank, tid) = (f.i, f.w, f.rank, f.tid);
        let ps = self.view.page;
        let me = ctl::sharer_bit(rank);
        let mapped_here = |w: u64| w & me != 0;
        let (first, end) = self.lock_near_cluster(ctl, i, (rank, tid, true), mapped_here);
        timer.lap(Cost::LockList);
        let ok = self
            .uffd
            .writeprotect(&self.reg, first * ps, (end - first) * ps, false, false)
            .is_ok()
            && resolve_run(
                |done| {
                    self.uffd
                        .continue_(&self.reg, i * ps + done, ps - done, false, false)
                },
                ps,
                ps,
            ) == ps;
        timer.lap(Cost::Pte);
        for p in first..end {
            ctl.page(p)
                .store(locked_word(ctl, p, (i, w)) | DIRTY, Ordering::Release);
        }
        ctl.add(rank, if ok { Stat::WpFaults } else { Stat::Errors }, 1);
        ok
    }

    /// `UFFDIO_CONTINUE` over `len` bytes at `off`, write-protected if
    /// `protect` and the kernel can; see [`Member::continue_wp`].
    fn continue_at(
        &self,
        off: usize,
        len: usize,
        protect: bool,
    ) -> Result<Resolved, tiermem_sys::uffd::UffdError> {
        let wp = protect && self.continue_wp.load(Ordering::Relaxed);
        match self.uffd.continue_(&self.reg, off, len, wp, false) {
            Err(tiermem_sys::uffd::UffdError::Ioctl { errno, .. }) if wp && errno.0 == libc::EINVAL => {
                self.continue_wp.store(false, Ordering::Relaxed);
                self.uffd.continue_(&self.reg, off, len, false, false)
            }
            r => r,
        }
    }

    /// Whether a fault installs its pages write-protected: a read, with
    /// dirty tracking. Pages installed writable carry [`DIRTY`].
    fn protects(&self, write: bool) -> bool {
        self.track_dirty && !write
    }

    /// A minor fault: the page is near, map it here too, with the near
    /// neighbours not mapped here that fault-around calls for. A read maps
    /// them write-protected; a write maps them writable and dirty (a write
    /// sweep takes no further fault on them, as in the engine).
    fn map_resident(&self, ctl: &Ctl<'_>, f: LockedFault, timer: &mut FaultTimer) -> bool {
        let (i, w, rank, tid, write) = (f.i, f.w, f.rank, f.tid, f.write);
        let ps = self.view.page;
        let me = ctl::sharer_bit(rank);
        let (first, end) = self.lock_near_cluster(ctl, i, (rank, tid, false), |w| w & me == 0);
        timer.lap(Cost::LockList);
        // Pages mapped from `a` on (an already mapped page counts): the
        // page and what follows it first, so that a neighbour before it
        // that fails cannot fail the fault.
        let protect = self.protects(write);
        let map = |a: usize, b: usize| {
            a + resolve_run(
                |done| self.continue_at(a * ps + done, (b - a) * ps - done, protect),
                (b - a) * ps,
                ps,
            ) / ps
        };
        let upper = map(i, end);
        let lower = if first < i { map(first, i) } else { first };
        if write && self.track_dirty && upper > i {
            // Another thread of this process (threads mode) may have mapped
            // it write-protected already. Should this fail, the page stays
            // protected, and the write faults again, to `unprotect`.
            let _ = self.uffd.writeprotect(&self.reg, i * ps, ps, false, false);
        }
        // Read after the runs: a failed `MODE_WP` left them writable.
        let dirty = if protect && self.continue_wp.load(Ordering::Relaxed) {
            0
        } else {
            DIRTY
        };
        timer.lap(Cost::Pte);
        let mapped = |p: usize| if p < i { p < lower } else { p < upper };
        // Only a mapping that exists makes this member a sharer.
        for p in first..end {
            let pw = locked_word(ctl, p, (i, w));
            let sharer = if mapped(p) { me | dirty } else { 0 };
            ctl.page(p).store(pw | sharer, Ordering::Release);
        }
        let ok = mapped(i);
        ctl.add(rank, if ok { Stat::MinorFaults } else { Stat::Errors }, 1);
        self.note_cluster(
            ctl,
            rank,
            tid,
            (first, end),
            (first..end).filter(|&p| p != i && mapped(p)),
        );
        ok
    }

    /// Takes up to `want` pages of the budget without evicting, leaving
    /// the last few (the faulting instruction may need more pages, as in
    /// the engine); returns how many.
    fn take_free(&self, ctl: &Ctl<'_>, want: usize) -> usize {
        let budget = ctl.get(H_BUDGET);
        let spare = crate::config::MIN_NEAR_PAGES as u64 - 1;
        loop {
            let cur = ctl.w[H_RESIDENT].load(Ordering::Acquire);
            let room = budget.saturating_sub(cur + spare).min(want as u64);
            if room == 0 {
                return 0;
            }
            if ctl.w[H_RESIDENT]
                .compare_exchange(cur, cur + room, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return room as usize;
            }
        }
    }

    /// A missing fault: make room, then fill page `i` (and the following
    /// pages in the same state, up to the read-ahead) from the far file or
    /// with zeros, with the neighbours fault-around calls for where free
    /// near memory allows (neighbours never evict). A read installs far
    /// pages write-protected and clean; a write, or a zero fill (mapped
    /// writable by the kernel), installs them dirty.
    fn fill(&self, ctl: &Ctl<'_>, f: LockedFault, timer: &mut FaultTimer) -> bool {
        let (i, w, rank, tid, write) = (f.i, f.w, f.rank, f.tid, f.write);
        let ps = self.view.page;
        let at = ctl::where_(w);
        let ahead = ctl.get(H_READAHEAD).max(1) as usize;
        let same = |w2: u64| ctl::where_(w2) == at;
        // `[i, i + n)`: the page and its read-ahead, reserved even if that
        // evicts.
        let n = self.lock_run(
            ctl,
            rank,
            (i + 1, true),
            (i, (i + ahead).min(self.view.npages)),
            same,
        ) - i;
        let unlock = |a: usize, b: usize| {
            for p in a..b {
                let pw = locked_word(ctl, p, (i, w));
                ctl.page(p).store(ctl::where_(pw) as u64, Ordering::Release);
            }
        };
        timer.lap(Cost::LockList);
        if !self.reserve(ctl, rank, n, timer) {
            unlock(i, i + n);
            return false;
        }
        // Then the neighbours, as many as free near memory holds: locked
        // only now, so that no member waits on them through an eviction.
        let (mut first, mut end) = (i, i + n);
        if let Some((lo, hi)) = self.around_window(ctl, i, (rank, tid, false)) {
            let want = (hi.max(end) - end) + (i - lo);
            let room = self.take_free(ctl, want);
            if room > 0 {
                let missing = |w2: u64| matches!(ctl::where_(w2), Where::Far | Where::Untouched);
                end = self.lock_run(ctl, rank, (end, true), (lo, hi.max(end).min(end + room)), missing);
                let left = room - (end - i - n);
                first = self.lock_run(
                    ctl,
                    rank,
                    (i, false),
                    (lo.max(i.saturating_sub(left)), hi),
                    missing,
                );
                let taken = (end - i - n) + (i - first);
                if taken < room {
                    ctl.w[H_RESIDENT].fetch_sub((room - taken) as u64, Ordering::AcqRel);
                }
            }
            timer.lap(Cost::LockList);
        }
        if let Some(fa) = &self.around {
            for p in (first..end).filter(|&p| p < i || p >= i + n) {
                if fa.refilled(p) {
                    ctl.add(rank, Stat::AroundUnused, 1);
                }
            }
        }
        // One copy (or zero fill) per run of one kind. A run that fails
        // part-way hands its remaining pages back; the others go on.
        let kind = |p: usize| {
            if p == i {
                at
            } else {
                ctl::where_(ctl.page(p).load(Ordering::Relaxed))
            }
        };
        let protect = self.protects(write);
        let me = ctl::sharer_bit(rank);
        let mut at_installed = false;
        // Installed pages: neighbours before and after the page's read-ahead
        // (bit per page, at most a window each side), and read-ahead pages.
        let (mut before, mut after, mut ahead_done) = (0u32, 0u32, 0u64);
        let mut s = first;
        while s < end {
            let k = kind(s);
            let mut e = s + 1;
            // A run ends before the faulting page too: a neighbour that
            // fails cannot fail the fault.
            while e < end && e != i && kind(e) == k {
                e += 1;
            }
            let len = (e - s) * ps;
            let done = if k == Where::Far {
                let src = self.view.far_map.range(s * ps, len);
                resolve_run(
                    |done| {
                        self.uffd.copy(
                            &self.reg,
                            s * ps + done,
                            src.sub(done, len - done),
                            CopyMode {
                                write_protect: protect,
                                dont_wake: false,
                            },
                        )
                    },
                    len,
                    ps,
                )
            } else {
                resolve_run(
                    |done| self.uffd.zeropage(&self.reg, s * ps + done, len - done, false),
                    len,
                    ps,
                )
            } / ps;
            timer.lap(Cost::Pte);
            if k == Where::Far {
                ctl.add(rank, Stat::BytesIn, (done * ps) as u64);
            }
            if done < e - s {
                ctl.add(rank, Stat::Errors, 1);
                ctl.w[H_RESIDENT].fetch_sub((e - s - done) as u64, Ordering::AcqRel);
                unlock(s + done, e);
            }
            if done > 0 {
                self.push_ring(ctl, rank, s, done);
                // Zero fills are mapped writable whatever the fault.
                let dirty = if protect && k == Where::Far { 0 } else { DIRTY };
                self.publish(ctl, s, done, Where::Resident as u64 | dirty, me);
                for p in s..s + done {
                    if p < i {
                        before |= 1 << (p - first);
                    } else if p >= i + n {
                        after |= 1 << (p - i - n);
                    } else if p == i {
                        at_installed = true;
                    } else {
                        ahead_done += 1;
                    }
                }
            }
            timer.lap(Cost::LockList);
            s = e;
        }
        let neighbours = (first..i)
            .filter(|&p| before & (1 << (p - first)) != 0)
            .chain((i + n..end).filter(|&p| after & (1 << (p - i - n)) != 0));
        self.note_cluster(ctl, rank, tid, (first, end), neighbours);
        if !at_installed {
            return false;
        }
        ctl.add(rank, Stat::MissingFaults, 1);
        ctl.add(rank, Stat::ReadaheadPages, ahead_done);
        if at != Where::Far {
            ctl.add(rank, Stat::ZeroFills, 1);
        }
        true
    }

    /// Copies `src` into the region at `off`; returns the bytes mapped
    /// from the start (all of them, or fewer where a copy failed).
    fn copy_some(&self, off: usize, src: tiermem_sys::mm::MemRange<'_>) -> usize {
        resolve_run(
            |done| {
                self.uffd.copy(
                    &self.reg,
                    off + done,
                    src.sub(done, src.len() - done),
                    CopyMode::default(),
                )
            },
            src.len(),
            self.view.page,
        )
    }

    /// Stores the final word of pages `i..i+n` (unlocking them).
    fn publish(&self, ctl: &Ctl<'_>, i: usize, n: usize, at: u64, sharers: u64) {
        for k in i..i + n {
            ctl.page(k).store(at | sharers, Ordering::Release);
        }
    }

    /// Counts `n` pages against the budget, evicting until they fit.
    /// False only if the team was aborted meanwhile.
    fn reserve(&self, ctl: &Ctl<'_>, rank: usize, n: usize, timer: &mut FaultTimer) -> bool {
        let budget = ctl.get(H_BUDGET);
        let batch = (ctl.get(H_BATCH) as usize).max(self.grown.load(Ordering::Relaxed));
        let mut spins = 0u32;
        loop {
            let cur = ctl.w[H_RESIDENT].load(Ordering::Acquire);
            if cur + n as u64 <= budget {
                if ctl.w[H_RESIDENT]
                    .compare_exchange(cur, cur + n as u64, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            let want = (cur + n as u64 - budget) as usize;
            if self.evict_some(ctl, rank, want.max(batch), timer) == 0 {
                // Every candidate is busy in another member's hands.
                backoff(&mut spins);
                if spins.is_multiple_of(8192) && ctl.get(H_ABORT) != 0 {
                    if !self.host {
                        process::exit_now(EXIT_ABORTED);
                    }
                    return false;
                }
            }
        }
    }

    fn push_ring(&self, ctl: &Ctl<'_>, rank: usize, first: usize, n: usize) {
        self.lock_list(ctl, rank);
        let tail = ctl.get(H_RING_TAIL);
        for k in 0..n {
            ctl.ring(tail + k as u64)
                .store((first + k) as u64, Ordering::Relaxed);
        }
        ctl.set(H_RING_TAIL, tail + n as u64);
        self.unlock_list(ctl);
    }

    fn lock_list(&self, ctl: &Ctl<'_>, rank: usize) {
        let mut spins = 0u32;
        loop {
            let cur = ctl.w[H_LOCK].load(Ordering::Relaxed);
            if cur == 0
                && ctl.w[H_LOCK]
                    .compare_exchange_weak(0, rank as u64 + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff(&mut spins);
            if spins.is_multiple_of(8192) && cur != 0 && self.owner_dead(ctl, cur as usize - 1) {
                // The holder died inside the list: the team is over; take
                // the lock so that the host can still read what is left.
                if !self.host {
                    process::exit_now(EXIT_ABORTED);
                }
                let _ = ctl.w[H_LOCK].compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    fn unlock_list(&self, ctl: &Ctl<'_>) {
        ctl.set(H_LOCK, 0);
    }

    fn owner_dead(&self, ctl: &Ctl<'_>, rank: usize) -> bool {
        let pid = ctl.pid(rank).load(Ordering::Acquire) & !crate::party::PID_FINISHED;
        let dead = pid != 0 && !process::exists(pid as u32);
        if dead {
            ctl.party().abort(rank);
        }
        dead
    }

    /// Waits for a busy page; false if its owner died (the page is lost).
    fn wait_busy(&self, ctl: &Ctl<'_>, i: usize, w: u64, spins: &mut u32) -> bool {
        backoff(spins);
        if (*spins).is_multiple_of(8192) {
            if ctl.get(H_ABORT) != 0 && !self.host {
                process::exit_now(EXIT_ABORTED);
            }
            if self.owner_dead(ctl, ctl::owner(w)) {
                if !self.host {
                    process::exit_now(EXIT_ABORTED);
                }
                let lost = ctl::with_where(0, Where::Lost);
                let _ = ctl
                    .page(i)
                    .compare_exchange(w, lost, Ordering::AcqRel, Ordering::Relaxed);
                return false;
            }
        }
        true
    }
}

/// The word of page `p` of a cluster locked around fault page `i`, as it
/// was before locking: the faulting page's is `w` (taken before its lock),
/// the neighbours' are their locked words without the lock.
fn locked_word(ctl: &Ctl<'_>, p: usize, (i, w): (usize, u64)) -> u64 {
    if p == i {
        w
    } else {
        ctl::unbusy(ctl.page(p).load(Ordering::Relaxed))
    }
}

/// Retries without progress before a resolving ioctl counts as failed.
const RETRY_LIMIT: u32 = 100_000;

/// Runs a resolving ioctl over `len` bytes, page by page where it must;
/// returns the bytes resolved from the start (a page already there
/// counts), short only where the ioctl failed.
fn resolve_run(
    mut op: impl FnMut(usize) -> Result<Resolved, tiermem_sys::uffd::UffdError>,
    len: usize,
    page: usize,
) -> usize {
    let mut done = 0;
    let mut idle = 0u32;
    while done < len {
        match op(done) {
            Ok(Resolved::Done) => return len,
            Ok(Resolved::Partial { bytes }) if bytes > 0 => done += bytes,
            // The kernel asks for a retry while the mappings change (the
            // ioctl makes no progress): give up after a while, as for a
            // failure, rather than spin forever in a signal handler.
            Ok(Resolved::Partial { .. }) if idle < RETRY_LIMIT => {
                idle += 1;
                std::thread::yield_now();
            }
            Ok(Resolved::Partial { .. }) => break,
            // The range's first page: the rest still needs the ioctl.
            Ok(Resolved::AlreadyMapped) => done += page,
            Err(_) => break,
        }
    }
    done.min(len)
}

/// Spin, then yield, then sleep. The locks are held for microseconds by a
/// member running on another CPU, so spinning is right at first; a sleep
/// (which costs tens of microseconds of wake-up latency on these VMs) only
/// once the holder seems descheduled, so waits never burn a CPU that the
/// holder needs.
fn backoff(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if *spins < 4096 {
        std::hint::spin_loop();
    } else if *spins < 8192 {
        std::thread::yield_now();
    } else {
        tiermem_sys::thread::sleep(Duration::from_micros(20));
    }
}

/// A member serves the SIGBUS faults of its view of the team region.
impl FaultHandler for Member {
    fn on_fault(&self, f: &Fault) -> Served {
        if f.signal != Signal::Bus {
            return Served::Forward;
        }
        match self.resolve(f.addr, f.tid, f.write) {
            Disposition::Retry => Served::Resolved,
            Disposition::Forward => Served::Forward,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `resolve_run` over scripted ioctl results (offsets asked, answers).
    fn scripted(answers: &[Result<Resolved, ()>], len: usize) -> (usize, Vec<usize>) {
        let mut asked = Vec::new();
        let mut it = answers.iter();
        let done = resolve_run(
            |at| {
                asked.push(at);
                match it.next() {
                    Some(Ok(r)) => Ok(*r),
                    Some(Err(())) | None => Err(tiermem_sys::uffd::UffdError::Ioctl {
                        op: "test",
                        addr: at,
                        len,
                        errno: tiermem_sys::Errno(libc::ENOMEM),
                    }),
                }
            },
            len,
            4096,
        );
        (done, asked)
    }

    #[test]
    fn resolve_run_counts_only_what_the_kernel_did() {
        let (done, asked) = scripted(&[Ok(Resolved::Done)], 4 * 4096);
        assert_eq!((done, asked), (4 * 4096, vec![0]));
        // A partial, then the rest.
        let (done, asked) = scripted(
            &[Ok(Resolved::Partial { bytes: 4096 }), Ok(Resolved::Done)],
            4 * 4096,
        );
        assert_eq!((done, asked), (4 * 4096, vec![0, 4096]));
        // An already mapped first page counts as one page, and the rest is
        // still asked for.
        let (done, asked) = scripted(&[Ok(Resolved::AlreadyMapped), Ok(Resolved::Done)], 4 * 4096);
        assert_eq!((done, asked), (4 * 4096, vec![0, 4096]));
        // A failure after two pages: two pages done.
        let (done, _) = scripted(&[Ok(Resolved::Partial { bytes: 8192 }), Err(())], 4 * 4096);
        assert_eq!(done, 8192);
        // Retries without progress end, as a failure.
        let stuck = vec![Ok(Resolved::Partial { bytes: 0 }); RETRY_LIMIT as usize + 10];
        let (done, asked) = scripted(&stuck, 4096);
        assert_eq!(done, 0);
        assert_eq!(asked.len(), RETRY_LIMIT as usize + 1);
    }
}
