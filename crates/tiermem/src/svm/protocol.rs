//! The Rhymes two-way coherence protocol (paper 5, section III and Fig. 3)
//! as run by one process: per page a mode (SPM, DSM, read-only private)
//! and a state, the dirty list, the twins, and what happens at a fault, a
//! release (unlock), an acquire (lock) and a barrier.
//!
//! | paper (Fig. 3)                              | here |
//! |---------------------------------------------|------|
//! | SPM: lock: CL1INVMB                         | `noncoherent`: `clflushopt` the lines of SPM pages named in the SPM write log since this process's last acquire; `coherent`: nothing |
//! | SPM: access                                 | direct, on the home file (`MAP_SHARED`) |
//! | SPM: unlock: flush the WCB                  | `noncoherent`: `clwb` the lines of pages written since the last release (found by write-protection), `sfence`; `coherent`: nothing |
//! | golden copy read-only while cached in DSM   | an SPM process write-protects pages that others cache in DSM; its write fault puts the page on its written list, and its release sends write notices for them |
//! | DSM: lock: invalidate per write notices     | notices of that lock since this process last held it; a page is invalidated only if its home version moved since it was fetched |
//! | DSM: 1st read: copy H to C, map read-only   | read fault on a `PROT_NONE` private page: copy from home, `PROT_READ` |
//! | DSM: 1st write: twin, dirty list, read-write | write fault: copy to the twin, add to the dirty list, `PROT_READ\|PROT_WRITE` |
//! | DSM: unlock: diff against twin into H       | byte-exact runs (only bytes that changed), version bump, write notices on the lock |
//! | barrier                                     | release, team barrier, then every cached page whose version moved is invalidated (validation) |
//!
//! Across nodes (an MPI transport), pages homed on another node cannot be
//! mapped: SPM there means a cached copy kept at *release* consistency
//! (flag `RC`: DSM machinery, but every acquire validates every such copy
//! by version, so a lock orders all writes, as SPM does). DSM pages are
//! DSM whatever their home.
//!
//! One thread per process uses the SVM (the paper's one core per process):
//! the fault handler and the calls below run on that thread. Page states
//! are atomics so that nothing is undefined if that rule is broken, but
//! the protocol's outcome then is.

use super::meta::{self, Meta, SPM_LOG_CAP};
use super::transport::{Notices, Transport};
use super::{SpmFlavour, Stat};
use crate::error::Error;
use crate::fault::{Fault, FaultHandler, RangeGuard, Served, Signal};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tiermem_sys::cache;
use tiermem_sys::mm::{MapOptions, Mapping, Protection};
use tiermem_sys::signal::Disposition;

// Page state byte: mode in bits 0-1, access in bits 2-3, flags above.
const MODE: u8 = 0b11;
pub(crate) const SPM: u8 = 0;
pub(crate) const DSM: u8 = 1;
pub(crate) const RO_PRIVATE: u8 = 2;
const ACCESS: u8 = 0b1100;
const NONE: u8 = 0;
const READ: u8 = 1 << 2;
const RW: u8 = 2 << 2;
/// Pages fetched by one DSM read fault (the faulting page and the invalid
/// DSM pages after it).
const READ_AHEAD: usize = 8;
/// On the dirty list (a write notice is due at the next release).
const DIRTY: u8 = 1 << 4;
/// On the SPM written list.
const WRITTEN: u8 = 1 << 5;
/// SPM page kept write-protected while clean, so writes are seen.
const TRACKED: u8 = 1 << 6;
/// DSM page that the program put in SPM mode, homed on another node:
/// validated at every acquire (release consistency).
const RC: u8 = 1 << 7;
/// Mode as the program chose it, with `RC`.
const KIND: u8 = MODE | RC;

fn mode(s: u8) -> u8 {
    s & MODE
}
fn access(s: u8) -> u8 {
    s & ACCESS
}
fn with_access(s: u8, a: u8) -> u8 {
    (s & !ACCESS) | a
}

/// A list of page ids that the fault handler can append to without
/// allocating.
struct PageList {
    ids: Vec<AtomicU32>,
    len: AtomicUsize,
}

impl PageList {
    fn new(cap: usize) -> PageList {
        PageList {
            ids: (0..cap).map(|_| AtomicU32::new(0)).collect(),
            len: AtomicUsize::new(0),
        }
    }
    /// Appends (each page is on the list at most once: its flag says so).
    fn push(&self, p: usize) {
        // Relaxed: one thread uses the list (see the module docs).
        let n = self.len.load(Ordering::Relaxed);
        self.ids[n].store(p as u32, Ordering::Relaxed);
        self.len.store(n + 1, Ordering::Relaxed);
    }
    fn take(&self) -> Vec<usize> {
        let n = self.len.swap(0, Ordering::Relaxed);
        self.ids[..n]
            .iter()
            .map(|x| x.load(Ordering::Relaxed) as usize)
            .collect()
    }
}

/// Everything the processes share: the heap range (mapped at the same
/// address in every process, inherited through fork) and the transport.
pub(crate) struct Shared {
    /// The SVM range; pages are SPM views of the home file or private
    /// copies, per process.
    pub(crate) heap: Mapping,
    pub(crate) heap_user: tiermem_sys::mm::UserAccess,
    pub(crate) t: Arc<dyn Transport>,
    pub(crate) flavour: SpmFlavour,
}

impl Shared {
    pub(crate) fn meta(&self) -> Meta<'_> {
        self.t.node().meta()
    }
    pub(crate) fn npages(&self) -> usize {
        self.t.node().npages
    }
    pub(crate) fn page_bytes(&self) -> usize {
        self.t.node().page_bytes
    }
}

/// Where the notice rings and the SPM log stood when a run started: every
/// process starts reading there, however late it joins.
pub(crate) struct Cursors {
    notices: Vec<u64>,
    spm_log: u64,
}

impl Cursors {
    pub(crate) fn now(t: &dyn Transport) -> Result<Cursors, Error> {
        let mut notices = Vec::new();
        t.notice_heads(&mut notices)?;
        Ok(Cursors {
            notices,
            spm_log: t.node().meta().h(meta::H_SPM_LOG_HEAD).load(Ordering::Acquire),
        })
    }
}

/// One process's protocol state.
pub(crate) struct Local {
    pub(crate) shared: Arc<Shared>,
    pub(crate) rank: usize,
    twin: Mapping,
    state: Vec<AtomicU8>,
    cached_version: Vec<AtomicU64>,
    dirty: PageList,
    written: PageList,
    /// Per lock: the notice position this process has seen.
    seen: Vec<AtomicU64>,
    spm_log_seen: AtomicU64,
    epoch_seen: AtomicU64,
    /// Pages with the `RC` flag (acquires skip the scan when none).
    rc_pages: AtomicUsize,
    pub(crate) malloc_calls: AtomicU64,
    ps: usize,
    /// The heap's registration with the fault router, until `leave`.
    routed: Mutex<Option<RangeGuard>>,
}

/// A process's protocol state serves the SIGSEGV faults of the heap.
impl FaultHandler for Local {
    fn on_fault(&self, f: &Fault) -> Served {
        if f.signal != Signal::Segv {
            return Served::Forward;
        }
        match self.fault((f.addr - self.shared.heap.addr()) / self.ps, f.write) {
            Disposition::Retry => Served::Resolved,
            Disposition::Forward => Served::Forward,
        }
    }
}

impl Local {
    /// Joins this process as `rank`: sets the initial mapping of the heap
    /// (all SPM; write-protected for `noncoherent`) and installs the fault
    /// handler. `remap`: the heap may hold mappings of an earlier run (an
    /// MPI rank runs in the process that made the heap, not in a fresh
    /// fork of it): map every page afresh.
    pub(crate) fn join(
        shared: Arc<Shared>,
        rank: usize,
        start: &Cursors,
        remap: bool,
    ) -> Result<Arc<Local>, Error> {
        let npages = shared.npages();
        let ps = shared.page_bytes();
        let opts = MapOptions {
            noreserve: true,
            ..MapOptions::default()
        };
        let (twin, _) = Mapping::anonymous(npages * ps, &opts)?;
        let m = shared.meta();
        m.pid(rank)
            .store(tiermem_sys::thread::getpid() as u64, Ordering::Release);
        let tracked = shared.flavour == SpmFlavour::Noncoherent;
        let s0 = if tracked { SPM | READ | TRACKED } else { SPM | RW };
        if tracked {
            shared.heap.protect(0, npages * ps, Protection::Read)?;
        }
        // Pages homed on other nodes cannot be mapped: SPM there is a
        // release-consistent cached copy (RC), faulted in on first use.
        let state: Vec<AtomicU8> = (0..npages)
            .map(|p| AtomicU8::new(if shared.t.is_local(p) { s0 } else { DSM | RC | NONE }))
            .collect();
        let remote: Vec<usize> = (0..npages).filter(|&p| !shared.t.is_local(p)).collect();
        if remap {
            let local: Vec<usize> = (0..npages).filter(|&p| shared.t.is_local(p)).collect();
            let prot = if tracked {
                Protection::Read
            } else {
                Protection::ReadWrite
            };
            for (start, n) in runs_of(&local) {
                shared.heap.replace_shared(
                    start * ps,
                    n * ps,
                    shared.t.node().home_fd(),
                    (start * ps) as u64,
                    prot,
                )?;
            }
        }
        for (start, n) in runs_of(&remote) {
            shared
                .heap
                .replace_private(start * ps, n * ps, Protection::None)?;
        }
        let local = Arc::new(Local {
            rank,
            twin,
            state,
            cached_version: (0..npages).map(|_| AtomicU64::new(0)).collect(),
            dirty: PageList::new(npages),
            written: PageList::new(npages),
            seen: start.notices.iter().map(|&h| AtomicU64::new(h)).collect(),
            spm_log_seen: AtomicU64::new(start.spm_log),
            epoch_seen: AtomicU64::new(u64::MAX),
            rc_pages: AtomicUsize::new(remote.len()),
            malloc_calls: AtomicU64::new(0),
            ps,
            routed: Mutex::new(None),
            shared,
        });
        let heap = &local.shared.heap;
        let guard = crate::fault::register(heap.addr(), heap.len(), local.clone())?;
        *local.routed.lock().unwrap_or_else(|p| p.into_inner()) = Some(guard);
        Ok(local)
    }

    /// Leaves: the fault handler no longer serves this process's heap
    /// (returns once no handler runs on it).
    pub(crate) fn leave(&self) {
        let guard = self.routed.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(guard);
    }

    fn meta(&self) -> Meta<'_> {
        self.shared.meta()
    }
    fn add(&self, s: Stat, v: u64) {
        self.meta().add(self.rank, s as usize, v);
    }
    fn st(&self, p: usize) -> u8 {
        self.state[p].load(Ordering::Relaxed)
    }
    fn set(&self, p: usize, s: u8) {
        self.state[p].store(s, Ordering::Relaxed);
    }
    fn protect(&self, p: usize, n: usize, prot: Protection) -> Result<(), Error> {
        Ok(self.shared.heap.protect(p * self.ps, n * self.ps, prot)?)
    }
    /// Mode of page `p` here, as the program chose it (a release-consistent
    /// copy of a page homed on another node is SPM).
    pub(crate) fn mode_of(&self, p: usize) -> u8 {
        let s = self.st(p);
        if s & RC != 0 {
            SPM
        } else {
            mode(s)
        }
    }

    /// Serves a SIGSEGV on page `p`. Runs in the signal handler: no
    /// allocation, no locks.
    fn fault(&self, p: usize, write: bool) -> Disposition {
        let s = self.st(p);
        let ok = match mode(s) {
            DSM => self.dsm_fault(p, s, write),
            SPM if write && s & TRACKED != 0 && access(s) == READ => {
                let r = self.protect(p, 1, Protection::ReadWrite);
                let mut s = with_access(s, RW);
                if s & WRITTEN == 0 {
                    s |= WRITTEN;
                    self.written.push(p);
                }
                self.set(p, s);
                self.add(Stat::SpmWriteFaults, 1);
                r.is_ok()
            }
            RO_PRIVATE if !write && access(s) == NONE => {
                let r = self.fetch(p, 1, false);
                self.set(p, with_access(s, READ));
                self.add(Stat::ReadFaults, 1);
                r.is_ok()
            }
            _ => false,
        };
        if ok {
            Disposition::Retry
        } else {
            Disposition::Forward
        }
    }

    fn dsm_fault(&self, p: usize, mut s: u8, write: bool) -> bool {
        if access(s) == NONE {
            // Read-ahead: the invalid DSM pages that follow come along (one
            // fault and two mprotects for the run instead of per page).
            let n = (p..self.state.len().min(p + READ_AHEAD))
                .take_while(|&q| {
                    let t = self.st(q);
                    mode(t) == DSM && access(t) == NONE
                })
                .count();
            let n = self.shared.t.home_run(p, n);
            if self.fetch(p, n, true).is_err() {
                return false;
            }
            for q in p..p + n {
                self.set(q, with_access(self.st(q), READ));
            }
            s = with_access(s, READ);
            if !write {
                self.add(Stat::ReadFaults, 1);
                return true;
            }
        }
        if !write || access(s) != READ {
            return false; // a real protection error (or a broken rule)
        }
        // First write: twin, dirty list, read-write (Fig. 3).
        self.twin
            .copy_in(p * self.ps, self.shared.heap.range(p * self.ps, self.ps));
        if s & DIRTY == 0 {
            s |= DIRTY;
            self.dirty.push(p);
        }
        self.set(p, with_access(s, RW));
        self.add(Stat::WriteFaults, 1);
        self.add(Stat::Twins, 1);
        self.protect(p, 1, Protection::ReadWrite).is_ok()
    }

    /// Copies the home page into the private copy and maps it read-only.
    /// `n` is at most `READ_AHEAD`, and the pages share one home.
    fn fetch(&self, first: usize, n: usize, cacher: bool) -> Result<(), Error> {
        let t = &self.shared.t;
        if !t.is_local(first) {
            let mut v = [0u64; READ_AHEAD];
            self.protect(first, n, Protection::ReadWrite)?;
            let r = t.fetch_remote(first, n, self.rank, cacher, &self.shared.heap, &mut v[..n]);
            if let Err(e) = r {
                // In the fault handler: the fault is forwarded and the
                // process dies of it; say why first.
                eprintln!(
                    "tiermem SVM: rank {}: fetching pages {first}..{}: {e}",
                    self.rank,
                    first + n
                );
                self.protect(first, n, Protection::None)?;
                return Err(e);
            }
            for (k, &ver) in v[..n].iter().enumerate() {
                self.cached_version[first + k].store(ver, Ordering::Relaxed);
            }
            self.protect(first, n, Protection::Read)?;
            self.add(Stat::Fetches, n as u64);
            return Ok(());
        }
        for p in first..first + n {
            if cacher {
                t.add_cacher(p, self.rank);
            }
            self.cached_version[p].store(t.version(p), Ordering::Relaxed);
            if self.shared.flavour == SpmFlavour::Noncoherent {
                // Our cache may hold old lines of the home page.
                self.add(
                    Stat::LinesInvalidated,
                    cache::invalidate(t.node().home_range(p)) as u64,
                );
            }
        }
        self.protect(first, n, Protection::ReadWrite)?;
        for p in first..first + n {
            t.fetch_page(p, &self.shared.heap, p * self.ps);
        }
        self.protect(first, n, Protection::Read)?;
        self.add(Stat::Fetches, n as u64);
        Ok(())
    }

    /// Applies the diffs of read-write DSM pages to their home copies (state
    /// and protection unchanged: the caller's business): local ones through
    /// shared memory, remote ones in one batch, then the versions of the
    /// pages that changed are bumped.
    fn diff_pages(&self, pages: &[usize]) -> Result<(), Error> {
        if pages.is_empty() {
            return Ok(());
        }
        let (heap, t) = (&self.shared.heap, &self.shared.t);
        let mut runs = Vec::new();
        let mut changed = Vec::new();
        let mut remote = Vec::new();
        let (mut total_bytes, mut total_runs) = (0, 0);
        for &p in pages {
            if !t.is_local(p) {
                remote.push(p);
                continue;
            }
            let (cur, twin) = (
                heap.range(p * self.ps, self.ps),
                self.twin.range(p * self.ps, self.ps),
            );
            let (bytes, nruns) = t.apply_diff(p, cur, twin, &mut runs);
            if bytes > 0 {
                if self.shared.flavour == SpmFlavour::Noncoherent {
                    // The diff must reach memory, and SPM readers must drop
                    // their lines of the page at their next acquire.
                    self.add(
                        Stat::LinesFlushed,
                        cache::write_back(t.node().home_range(p)) as u64,
                    );
                    self.log_spm_write(p);
                }
                changed.push(p);
            }
            total_bytes += bytes;
            total_runs += nruns;
        }
        if !remote.is_empty() {
            let mut out = Vec::new();
            t.apply_remote_diffs(&remote, heap, &self.twin, &mut out)?;
            for (&p, &(bytes, nruns)) in remote.iter().zip(&out) {
                if bytes > 0 {
                    changed.push(p);
                }
                total_bytes += bytes;
                total_runs += nruns;
            }
        }
        let mut before = Vec::new();
        t.bump_versions(&changed, &mut before)?;
        for (&p, &b) in changed.iter().zip(&before) {
            // Our copy equals home only if nobody else changed home since we
            // fetched it; otherwise the next validation refetches.
            if b == self.cached_version[p].load(Ordering::Relaxed) {
                self.cached_version[p].store(b + 1, Ordering::Relaxed);
            }
        }
        self.add(Stat::Diffs, pages.len() as u64);
        self.add(Stat::DiffRuns, total_runs as u64);
        self.add(Stat::DiffBytes, total_bytes as u64);
        Ok(())
    }

    /// Applies the diff of a read-write DSM page; the page becomes
    /// read-only (it stays on the dirty list for its notice).
    /// Protects `pages` (sorted here), one `mprotect` per run.
    fn protect_pages(&self, pages: &mut [usize], prot: Protection) -> Result<(), Error> {
        pages.sort_unstable();
        for (start, n) in runs_of(pages) {
            self.protect(start, n, prot)?;
        }
        Ok(())
    }

    /// Drops the cached copies of `pages` (after applying the diffs of
    /// dirty ones).
    fn invalidate_pages(&self, mut pages: Vec<usize>) -> Result<(), Error> {
        let rw: Vec<usize> = pages
            .iter()
            .copied()
            .filter(|&p| access(self.st(p)) == RW)
            .collect();
        self.diff_pages(&rw)?;
        let mut uncache = Vec::new();
        for &p in &pages {
            let s = self.st(p);
            self.set(p, with_access(s, NONE));
            if mode(s) == DSM {
                uncache.push(p);
            }
        }
        self.shared.t.remove_cachers(&uncache, self.rank)?;
        self.add(Stat::Invalidations, pages.len() as u64);
        self.protect_pages(&mut pages, Protection::None)
    }

    /// Those of `pages` (sorted, distinct) that are cached and whose home
    /// moved since they were fetched (one batch of version reads).
    fn stale_among(&self, pages: Vec<usize>) -> Result<Vec<usize>, Error> {
        let cached: Vec<usize> = pages
            .into_iter()
            .filter(|&p| {
                let s = self.st(p);
                mode(s) != SPM && access(s) != NONE
            })
            .collect();
        let mut v = Vec::new();
        self.shared.t.versions(&cached, &mut v)?;
        Ok(cached
            .into_iter()
            .zip(v)
            .filter(|&(p, ver)| ver != self.cached_version[p].load(Ordering::Relaxed))
            .map(|(p, _)| p)
            .collect())
    }

    /// Release (unlock `lock`, or the first half of a barrier): diffs of
    /// dirty DSM pages into their home copies, SPM lines written back,
    /// write notices attached to the lock.
    pub(crate) fn release(&self, lock: Option<usize>) -> Result<(), Error> {
        let t = &self.shared.t;
        let mut notices: Vec<u32> = Vec::new();
        let mut diffed = Vec::new();
        let dirty = self.dirty.take();
        for &p in &dirty {
            let s = self.st(p);
            // A page that left DSM mode had its diff applied then.
            if mode(s) == DSM && access(s) == RW {
                diffed.push(p);
            }
        }
        self.diff_pages(&diffed)?;
        for p in dirty {
            let s = self.st(p) & !DIRTY;
            if mode(s) == DSM && access(s) == RW {
                self.set(p, with_access(s, READ));
            } else {
                self.set(p, s);
            }
            notices.push(p as u32);
        }
        self.protect_pages(&mut diffed, Protection::Read)?;
        let noncoherent = self.shared.flavour == SpmFlavour::Noncoherent;
        for p in self.written.take() {
            let s = self.st(p) & !WRITTEN;
            if noncoherent {
                // Through the home view: the same physical lines whatever
                // this process maps at the page now.
                self.add(
                    Stat::LinesFlushed,
                    cache::write_back(t.node().home_range(p)) as u64,
                );
                self.log_spm_write(p);
            }
            t.bump_version(p);
            if t.cachers(p) & !(1 << self.rank) != 0 {
                notices.push(p as u32);
            }
            if mode(s) == SPM && s & TRACKED != 0 && access(s) == RW {
                self.protect(p, 1, Protection::Read)?;
                self.set(p, with_access(s, READ));
            } else {
                self.set(p, s);
            }
        }
        if !noncoherent {
            self.track_new_dsm_pages(&mut notices)?;
        }
        if let Some(id) = lock {
            t.publish_notices(id, &notices)?;
            self.add(Stat::NoticesSent, notices.len() as u64);
        }
        Ok(())
    }

    /// `coherent` SPM pages are written without faults, except those that
    /// another process caches in DSM mode: those are write-protected so
    /// that writes to them produce notices (the paper's read-only golden
    /// copy). When the set of DSM-cached pages grew since the last look,
    /// pages that became DSM-cached are reported as written (they may have
    /// been, untracked) and write-protected from now on.
    fn track_new_dsm_pages(&self, notices: &mut Vec<u32>) -> Result<(), Error> {
        let t = &self.shared.t;
        // SeqCst fence: orders our plain stores to SPM pages before the
        // epoch load (see LocalShm::add_cacher).
        fence(Ordering::SeqCst);
        let epoch = self.meta().h(meta::H_DSM_EPOCH).load(Ordering::SeqCst);
        if epoch == self.epoch_seen.load(Ordering::Relaxed) {
            return Ok(());
        }
        for p in 0..self.state.len() {
            let s = self.st(p);
            if mode(s) == SPM && s & TRACKED == 0 && t.cachers(p) & !(1 << self.rank) != 0 {
                t.bump_version(p);
                notices.push(p as u32);
                self.protect(p, 1, Protection::Read)?;
                self.set(p, with_access(s | TRACKED, READ));
                self.add(Stat::SpmTracked, 1);
            }
        }
        self.epoch_seen.store(epoch, Ordering::Relaxed);
        Ok(())
    }

    fn log_spm_write(&self, p: usize) {
        let m = self.meta();
        let seq = m.h(meta::H_SPM_LOG_HEAD).fetch_add(1, Ordering::AcqRel);
        // Release: a reader that sees the tag sees the page's flushed lines.
        m.spm_log(seq)
            .store(((seq + 1) & 0xffff_ffff) << 32 | p as u64, Ordering::Release);
    }

    /// `noncoherent` acquire: invalidate the lines of SPM pages that others
    /// wrote since our last acquire (all SPM pages if the log overflowed).
    fn invalidate_spm_lines(&self) {
        let m = self.meta();
        let head = m.h(meta::H_SPM_LOG_HEAD).load(Ordering::Acquire);
        let mut seen = self.spm_log_seen.load(Ordering::Relaxed);
        let mut lines = 0;
        if head - seen.min(head) > SPM_LOG_CAP as u64 {
            for p in 0..self.state.len() {
                if mode(self.st(p)) == SPM {
                    lines += cache::invalidate(self.shared.heap.range(p * self.ps, self.ps));
                }
            }
            seen = head;
            self.add(Stat::Overflows, 1);
        }
        while seen < head {
            let e = m.spm_log(seen).load(Ordering::Acquire);
            if e >> 32 != (seen + 1) & 0xffff_ffff {
                break; // still being written: its release is not ours to see yet
            }
            let p = (e & 0xffff_ffff) as usize;
            if p < self.state.len() && mode(self.st(p)) == SPM {
                lines += cache::invalidate(self.shared.heap.range(p * self.ps, self.ps));
            }
            seen += 1;
        }
        self.spm_log_seen.store(seen, Ordering::Relaxed);
        self.add(Stat::LinesInvalidated, lines as u64);
    }

    /// Acquire of lock `id` (held now): invalidate cached copies named in
    /// its write notices.
    pub(crate) fn acquire(&self, id: usize) -> Result<(), Error> {
        let mut pages = Vec::new();
        let seen = self.seen[id].load(Ordering::Relaxed);
        match self.shared.t.notices_since(id, seen, &mut pages)? {
            Notices::Since(head) => {
                self.add(Stat::NoticesReceived, pages.len() as u64);
                let mut cands: Vec<usize> = pages
                    .into_iter()
                    .map(|p| p as usize)
                    .filter(|&p| mode(self.st(p)) == DSM)
                    .collect();
                // Release consistency for SPM pages homed elsewhere: every
                // cached one is validated, whatever lock ordered its writes.
                if self.rc_pages.load(Ordering::Relaxed) > 0 {
                    cands.extend((0..self.state.len()).filter(|&p| self.st(p) & RC != 0));
                }
                cands.sort_unstable();
                cands.dedup();
                let stale = self.stale_among(cands)?;
                self.invalidate_pages(stale)?;
                self.seen[id].store(head, Ordering::Relaxed);
            }
            Notices::Overflow(head) => {
                self.add(Stat::Overflows, 1);
                self.validate_all(false)?;
                self.seen[id].store(head, Ordering::Relaxed);
            }
        }
        if self.shared.flavour == SpmFlavour::Noncoherent {
            self.invalidate_spm_lines();
        }
        Ok(())
    }

    /// Validates every cached DSM page (and read-only private pages if
    /// `ro_private`).
    fn validate_all(&self, ro_private: bool) -> Result<(), Error> {
        let cands: Vec<usize> = (0..self.state.len())
            .filter(|&p| {
                let m = mode(self.st(p));
                m == DSM || (ro_private && m == RO_PRIVATE)
            })
            .collect();
        let stale = self.stale_among(cands)?;
        self.invalidate_pages(stale)
    }

    /// The second half of a barrier (after every process released).
    /// `changes`: what the barrier carried, if it did (an MPI job across
    /// nodes): every page some process changed since the previous barrier
    /// with its newest version, sorted by page. Cached copies of remote
    /// pages are then validated against it instead of reading their
    /// versions from home.
    pub(crate) fn after_barrier(&self, changes: Option<&[(usize, u64)]>) -> Result<(), Error> {
        match changes {
            None => self.validate_all(true)?,
            Some(ch) => {
                let t = &self.shared.t;
                let (local, remote): (Vec<usize>, Vec<usize>) = (0..self.state.len())
                    .filter(|&p| {
                        let s = self.st(p);
                        mode(s) != SPM && access(s) != NONE
                    })
                    .partition(|&p| t.is_local(p));
                let mut stale = self.stale_among(local)?;
                stale.extend(remote.into_iter().filter(|&p| {
                    ch.binary_search_by_key(&p, |c| c.0)
                        .is_ok_and(|i| ch[i].1 > self.cached_version[p].load(Ordering::Relaxed))
                }));
                stale.sort_unstable();
                self.invalidate_pages(stale)?;
            }
        }
        if self.shared.flavour == SpmFlavour::Noncoherent {
            self.invalidate_spm_lines();
        }
        self.add(Stat::Barriers, 1);
        Ok(())
    }

    /// Puts pages `first..first + n` in `target` mode (`SPM`, `DSM` or
    /// `RO_PRIVATE`) for this process. A dirty DSM page leaving DSM mode
    /// has its diff applied first (its notice goes out at the next
    /// release); an SPM page written since the last release keeps its place
    /// on the written list. SPM on a page homed on another node is a
    /// release-consistent cached copy (`DSM | RC`): between that and DSM
    /// only the flag changes, and the cached copy stays.
    pub(crate) fn set_mode(&self, first: usize, n: usize, target: u8) -> Result<(), Error> {
        let t = &self.shared.t;
        let mut changed = Vec::new();
        let mut to_diff = Vec::new();
        let mut uncache = Vec::new();
        for p in first..first + n {
            let s = self.st(p);
            let want = if target == SPM && !t.is_local(p) {
                DSM | RC
            } else {
                target
            };
            if s & KIND == want {
                continue;
            }
            if mode(s) == DSM && mode(want) == DSM {
                self.set(p, (s & !RC) | (want & RC));
                self.count_rc(s, want);
                continue;
            }
            if access(s) == RW && mode(s) == DSM {
                // The remap below replaces the mapping and the state.
                to_diff.push(p);
            }
            if mode(s) == DSM && access(s) != NONE {
                uncache.push(p);
            }
            if mode(s) == SPM && s & (TRACKED | WRITTEN) == 0 {
                // Perhaps written untracked (coherent) since the last
                // release: report it like a tracked write if someone caches
                // it in DSM. The SeqCst fence orders our stores before the
                // mask load; a cacher that joins later fetches after them.
                fence(Ordering::SeqCst);
                if t.cachers(p) & !(1 << self.rank) != 0 {
                    self.written.push(p);
                    self.set(p, s | WRITTEN);
                }
            }
            changed.push(p);
        }
        self.diff_pages(&to_diff)?;
        t.remove_cachers(&uncache, self.rank)?;
        self.add(Stat::ModeSwitchPages, changed.len() as u64);
        let noncoherent = self.shared.flavour == SpmFlavour::Noncoherent;
        let (to_spm, to_private): (Vec<usize>, Vec<usize>) =
            changed.iter().partition(|&&p| target == SPM && t.is_local(p));
        for (start, len) in runs_of(&to_spm) {
            let off = start * self.ps;
            let prot = if noncoherent {
                Protection::Read
            } else {
                Protection::ReadWrite
            };
            self.shared
                .heap
                .replace_shared(off, len * self.ps, t.node().home_fd(), off as u64, prot)?;
        }
        for (start, len) in runs_of(&to_private) {
            self.shared
                .heap
                .replace_private(start * self.ps, len * self.ps, Protection::None)?;
        }
        for &p in &changed {
            let old = self.st(p);
            let flags = old & (DIRTY | WRITTEN);
            let s = if target == SPM && t.is_local(p) {
                if noncoherent {
                    SPM | READ | TRACKED
                } else if t.cachers(p) & !(1 << self.rank) != 0 {
                    self.protect(p, 1, Protection::Read)?;
                    SPM | READ | TRACKED
                } else {
                    SPM | RW
                }
            } else if target == SPM {
                DSM | RC | NONE
            } else {
                target | NONE
            };
            self.count_rc(old, s);
            self.set(p, s | flags);
        }
        Ok(())
    }

    /// Keeps `rc_pages` right when a page's state goes from `old` to `new`.
    fn count_rc(&self, old: u8, new: u8) {
        // Relaxed: one thread uses the protocol state (module docs).
        match (old & RC != 0, new & RC != 0) {
            (false, true) => {
                self.rc_pages.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.rc_pages.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// Maximal runs `(start, len)` of consecutive values in a sorted list.
fn runs_of(pages: &[usize]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some((s, l)) if *s + *l == p => *l += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_consecutive_pages() {
        assert_eq!(runs_of(&[1, 2, 3, 7, 9, 10]), vec![(1, 3), (7, 1), (9, 2)]);
        assert!(runs_of(&[]).is_empty());
    }

    #[test]
    fn state_bits_do_not_collide() {
        let s = DSM | RW | DIRTY | WRITTEN | TRACKED;
        assert_eq!(mode(s), DSM);
        assert_eq!(access(s), RW);
        assert_eq!(access(with_access(s, READ)), READ);
        assert_eq!(
            with_access(s, NONE) & (DIRTY | WRITTEN | TRACKED),
            DIRTY | WRITTEN | TRACKED
        );
        assert_eq!(mode(RO_PRIVATE | READ), RO_PRIVATE);
    }
}
