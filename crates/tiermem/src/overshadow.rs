//! Overshadow (paper 2, Hori et al.): read far memory at once, and switch
//! each page to its near copy as soon as that copy is done.
//!
//! [`Overshadow::create`] maps the far pages a second time at `to`
//! (read-only, `MAP_SHARED` over the far memory's descriptor), hands the
//! range to the mover threads, and returns: `to` is readable at once and
//! shows the far bytes. A mover (the DMA engine's analogue) copies the far
//! memory in chunks into a near staging mapping (`pread` from the
//! descriptor, paced by an optional [`LinkEmulation`]) and switches each
//! chunk with one `mremap(MREMAP_FIXED | MREMAP_DONTUNMAP)` of the staging
//! pages over `to`: the kernel replaces the far pages by the near ones under
//! the address-space lock, so a reader sees either page, both holding the
//! same bytes, and one TLB flush covers the chunk. Chunks start small (the
//! first page is near early) and double up to a limit (few `mremap`s and
//! TLB flushes for large regions); moved chunks merge back into one VMA.
//!
//! [`Switch::Whole`] is the paper's first prototype: copy everything, then
//! switch all pages at the end.
//!
//! # Writes during the copy (undefined in the paper)
//! Pages of `to` that have not switched are read-only. A write to one raises
//! SIGSEGV; tiermem's in-context handler (on the writing thread) copies that
//! page (with the rest of its 64 KiB block that is still far) and switches
//! it itself, or waits while a mover is copying it, then restarts the write.
//! A write therefore waits for its page only and is never lost. Writes go to
//! the near copy only, never to `from`. Writes to `from` itself during an
//! overshadow may or may not be seen at `to`.
//!
//! # Page states
//! One byte per page: `FAR` (mapped far, read-only) -> `CLAIMED` (a mover
//! or a write fault copies it; only the claimer changes it) -> `COPIED`
//! (in staging, whole-region switch only) -> `CLAIMED` (being switched) ->
//! `NEAR` (switched, writable). `FAILED` if the copy failed (the data is
//! still readable at `to`; a write to it is forwarded as a crash, as a
//! failed read of a file mapping would be).
//!
//! # Destroy
//! 1. set `cancel` and take the job off the mover queue (under its lock, so
//!    no mover picks it afterwards);
//! 2. wait until no mover is inside one of its chunks (a mover finishes the
//!    chunk it holds, so no page stays `CLAIMED`);
//! 3. remove it from the fault registry and wait until no fault handler
//!    holds it;
//! 4. unmap `to` and staging, drop the far descriptor's reference.
//!
//! ```
//! use tiermem::far::FarMemory;
//! use tiermem::overshadow::{Options, Overshadow};
//! use std::sync::atomic::Ordering::Relaxed;
//! let far = FarMemory::alloc(4 << 20)?;
//! far.as_atomic_u64()[9].store(42, Relaxed);
//! let os = Overshadow::create(far.addr(), far.len(), &Options::default())?;
//! assert_eq!(os.as_atomic_u64()[9].load(Relaxed), 42); // readable at once
//! os.as_atomic_u64()[10].store(1, Relaxed);             // waits for its page only
//! os.wait()?;
//! assert!(os.test() && os.is_near(0));
//! # Ok::<(), tiermem::Error>(())
//! ```

use crate::far::{self, FarSource};
use crate::fault::{Fault, FaultHandler, RangeGuard, Served, Signal};
use crate::Error;
use crossbeam_utils::Backoff;
use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tiermem_sys::mm::{base_page_size, Advice, MapOptions, Mapping, UserAccess};

use tiermem_sys::thread::{futex_wait, futex_wake};
use tiermem_sys::Errno;

/// When pages switch to their near copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// Each chunk as soon as its copy is done (default).
    PerPage,
    /// All pages after the whole copy (the paper's first prototype).
    Whole,
}

impl Switch {
    /// `per-page` or `whole`.
    pub fn name(self) -> &'static str {
        match self {
            Switch::PerPage => "per-page",
            Switch::Whole => "whole",
        }
    }
}

/// An emulated slow link between far and near memory: every transfer of
/// the movers costs `latency_us` plus its bytes at `bandwidth_bytes_per_s`
/// (the mover waits that long; transfers of one overshadow are serialised).
/// This is an emulation, not a measurement of any real link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkEmulation {
    /// Bytes per second.
    pub bandwidth_bytes_per_s: f64,
    /// Per transfer, microseconds.
    pub latency_us: f64,
}

impl LinkEmulation {
    /// Emulated time of one transfer of `bytes`.
    pub fn transfer_time(&self, bytes: usize) -> Duration {
        Duration::from_secs_f64(self.latency_us * 1e-6 + bytes as f64 / self.bandwidth_bytes_per_s)
    }
}

/// How an overshadow copies and switches.
#[derive(Clone, Debug)]
pub struct Options {
    /// Per-page (default) or whole-region switch.
    pub switch: Switch,
    /// Emulated slow link for the movers' copies (None: full speed).
    pub link: Option<LinkEmulation>,
    /// First chunk, bytes (chunks double from here). Default 256 KiB: a
    /// switch costs ~30-150 us here (TLB-shootdown IPIs between vCPUs,
    /// unmapping the far pages the reader mapped), so smaller first chunks
    /// add more switch time than they save.
    pub chunk_min_bytes: usize,
    /// Largest chunk, bytes. Default 2 MiB.
    pub chunk_max_bytes: usize,
    /// Transparent huge pages for the near copy beyond the first 2 MiB
    /// (fewer faults, 2 MiB page-table moves). Default off: on these VMs a
    /// huge page fault on memory the guest had returned to the host is slow
    /// and erratic (a 512 MiB copy took 1.0-2.3 s with huge pages, 0.3-0.55 s
    /// with 4 KiB pages faulted in by `MADV_POPULATE_WRITE`); with warm
    /// memory huge pages are faster (256 MiB in 70 ms).
    pub huge_pages: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            switch: Switch::PerPage,
            link: None,
            chunk_min_bytes: 256 << 10,
            chunk_max_bytes: 2 << 20,
            huge_pages: false,
        }
    }
}

/// What one overshadow did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OvershadowStats {
    /// Chunks copied by movers.
    pub chunks: u64,
    /// `mremap` switches (each one TLB flush).
    pub switches: u64,
    /// Pages copied and switched by write faults.
    pub forced_pages: u64,
    /// Bytes copied.
    pub bytes_copied: u64,
    /// Seconds from create until every page was copied (`T_DMA` plus
    /// per-chunk switches for per-page switch).
    pub copy_seconds: f64,
    /// Seconds spent in `mremap` switches, summed.
    pub switch_seconds: f64,
    /// Seconds from create until every page was near.
    pub done_seconds: f64,
}

// Page states (see the module docs).
const FAR: u8 = 0;
const CLAIMED: u8 = 1;
const COPIED: u8 = 2;
const NEAR: u8 = 3;
const FAILED: u8 = 4;

// Values of `Job::done`.
const RUNNING: u32 = 0;
const DONE: u32 = 1;
const BROKEN: u32 = 2;

/// Pages a write fault copies at most: the rest of its block still far.
const FORCE_BLOCK_BYTES: usize = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Overshadow(Switch),
    /// Plain DMA: copy into the near buffer, switch nothing.
    Copy,
}

/// The read-only second mapping of the far pages, at `to`.
struct View {
    map: Mapping,
    user: UserAccess,
}

struct Job {
    // Field order: `to` and staging are unmapped before `source` drops the
    // last reference to the far descriptor.
    view: Option<View>,
    staging: Mapping,
    staging_user: UserAccess,
    source: FarSource,
    mode: Mode,
    page: usize,
    pages: usize,
    chunk_min_pages: usize,
    chunk_max_pages: usize,
    states: Box<[AtomicU8]>,
    /// Next page a mover claims from.
    cursor: AtomicUsize,
    /// Pages whose copy is done (COPIED or NEAR, or FAILED).
    settled: AtomicUsize,
    /// Pages NEAR.
    near: AtomicUsize,
    /// RUNNING, DONE or BROKEN; a futex word for `wait`.
    done: AtomicU32,
    /// Bumped on every state publish; a futex word for page waiters.
    changed: AtomicU32,
    page_waiters: AtomicU32,
    cancel: AtomicBool,
    /// Movers inside one of this job's chunks.
    active: AtomicUsize,
    link: Option<LinkEmulation>,
    /// Nanoseconds after `created` when the emulated link is free again.
    link_free_ns: AtomicU64,
    /// First failure: errno, and whether it was the copy (1) or switch (2).
    error_errno: AtomicI32,
    error_op: AtomicU8,
    created: Instant,
    chunks: AtomicU64,
    switches: AtomicU64,
    forced_pages: AtomicU64,
    switch_ns: AtomicU64,
    copied_ns: AtomicU64,
    done_ns: AtomicU64,
}

impl Job {
    fn new(from: usize, size: usize, opts: &Options, mode: Mode) -> Result<Job, Error> {
        let page = base_page_size();
        if size == 0 {
            return Err(Error::Usage("overshadow of 0 bytes".into()));
        }
        if from % page != 0 || size % page != 0 {
            return Err(Error::Usage(format!(
                "overshadow of {size} bytes at {from:#x}: address and size must be multiples of {page}"
            )));
        }
        let min = opts.chunk_min_bytes;
        let max = opts.chunk_max_bytes;
        if min < page || min % page != 0 || max < min || max % page != 0 {
            return Err(Error::Usage(format!(
                "overshadow chunks {min}..{max} bytes: must be page multiples with min <= max"
            )));
        }
        if let Some(l) = opts.link {
            if !(l.bandwidth_bytes_per_s > 0.0 && l.latency_us >= 0.0 && l.latency_us.is_finite()) {
                return Err(Error::Usage(format!("bad link emulation {l:?}")));
            }
        }
        let source = far::lookup(from, size).ok_or_else(|| {
            Error::Usage(format!(
                "{from:#x}+{size} is not far memory tiermem can map a second time \
                 (allocate it with far_alloc / tm_far_alloc or map a file with tm_far_map_file)"
            ))
        })?;
        let huge = 2 << 20;
        let align = if size >= huge { huge } else { 0 };
        let view = match mode {
            Mode::Copy => None,
            Mode::Overshadow(_) => {
                let o = MapOptions {
                    read_only: true,
                    align,
                    ..Default::default()
                };
                let (map, user) =
                    Mapping::shared(source.backing.fd.as_fd(), source.fd_offset, size, page, &o)?;
                if source.backing.kind == far::FarKind::File {
                    // The mover streams the file; a read of `to` that gets
                    // ahead of it fetches its own page only, not the
                    // device's read-around window (8 MiB here: milliseconds
                    // before the first byte). Best effort.
                    let _ = map.advise(0, size, Advice::Random);
                }
                Some(View { map, user })
            }
        };
        let (staging, staging_user) = Mapping::anonymous(
            size,
            &MapOptions {
                align,
                ..Default::default()
            },
        )?;
        if opts.huge_pages && size > huge {
            // Best effort: without THP the copy is slower, not wrong.
            let _ = staging.advise(huge, size - huge, Advice::HugePage);
        }
        let pages = size / page;
        let (chunk_min_pages, chunk_max_pages) = match mode {
            Mode::Overshadow(Switch::PerPage) => (min / page, max / page),
            // Nothing switches before the end: no reason for small chunks.
            _ => (max / page, max / page),
        };
        Ok(Job {
            view,
            staging,
            staging_user,
            source,
            mode,
            page,
            pages,
            chunk_min_pages,
            chunk_max_pages,
            states: (0..pages).map(|_| AtomicU8::new(FAR)).collect(),
            cursor: AtomicUsize::new(0),
            settled: AtomicUsize::new(0),
            near: AtomicUsize::new(0),
            done: AtomicU32::new(RUNNING),
            changed: AtomicU32::new(0),
            page_waiters: AtomicU32::new(0),
            cancel: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            link: opts.link,
            link_free_ns: AtomicU64::new(0),
            error_errno: AtomicI32::new(0),
            error_op: AtomicU8::new(0),
            created: Instant::now(),
            chunks: AtomicU64::new(0),
            switches: AtomicU64::new(0),
            forced_pages: AtomicU64::new(0),
            switch_ns: AtomicU64::new(0),
            copied_ns: AtomicU64::new(0),
            done_ns: AtomicU64::new(0),
        })
    }

    fn elapsed_ns(&self) -> u64 {
        self.created.elapsed().as_nanos() as u64
    }

    /// Reserves the emulated link for a transfer of `bytes` and returns
    /// when it completes (ns after `created`), or None without emulation.
    ///
    /// The link is an emulated DMA engine with one transfer queued ahead:
    /// a transfer starts when the previous one ends, or at most one
    /// transfer time before now, so the CPU work of one chunk (the local
    /// copy, the switch) overlaps the next chunk's transfer as it would
    /// with a real engine, and an idle link banks no time.
    fn reserve_link(&self, bytes: usize) -> Option<u64> {
        let link = self.link?;
        let cost = link.transfer_time(bytes).as_nanos() as u64;
        let now = self.elapsed_ns();
        // Relaxed: the value only orders emulated transfers among
        // themselves; the CAS makes each reservation unique.
        let mut free = self.link_free_ns.load(Ordering::Relaxed);
        loop {
            let end = free.max(now.saturating_sub(cost)) + cost;
            match self
                .link_free_ns
                .compare_exchange_weak(free, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(end),
                Err(v) => free = v,
            }
        }
    }

    /// Waits until `end` (ns after `created`), spinning: the mover stands
    /// for a DMA engine that is busy for the transfer, and a sleeping
    /// thread on a shared CPU wakes up late (the emulated link would be
    /// slower than asked for).
    fn wait_until(&self, end: u64) {
        while self.elapsed_ns() < end {
            std::hint::spin_loop();
        }
    }

    /// Pages in the chunk that starts at page `start`: chunks double from
    /// the minimum (256 KiB, 256 KiB, 512 KiB, ...), so the first pages switch
    /// early and large regions take few switches; once at the maximum they
    /// stay aligned to it.
    fn chunk_pages(&self, start: usize) -> usize {
        start
            .clamp(self.chunk_min_pages, self.chunk_max_pages)
            .min(self.pages - start)
    }

    /// Claims the next chunk for a mover: `(first page, pages)`.
    fn claim_chunk(&self) -> Option<(usize, usize)> {
        // Relaxed: the cursor only hands out disjoint ranges; page states
        // carry the data ordering.
        let mut start = self.cursor.load(Ordering::Relaxed);
        loop {
            if start >= self.pages {
                return None;
            }
            let n = self.chunk_pages(start);
            match self
                .cursor
                .compare_exchange_weak(start, start + n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some((start, n)),
                Err(v) => start = v,
            }
        }
    }

    fn has_chunks(&self) -> bool {
        // Relaxed: a hint; claim_chunk and the page states decide.
        self.cursor.load(Ordering::Relaxed) < self.pages && !self.cancel.load(Ordering::Relaxed)
    }

    /// Claims pages `first..` while they are in state `from`, up to `end`.
    /// Returns how many (0 if `first` itself was not `from`).
    fn claim_run(&self, first: usize, end: usize, from: u8) -> usize {
        let mut n = 0;
        // Acquire: a page claimed from COPIED sees the staging bytes its
        // copier wrote before publishing COPIED.
        while first + n < end
            && self.states[first + n]
                .compare_exchange(from, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            n += 1;
        }
        n
    }

    /// Copies claimed pages `first..first + n` from far into staging.
    /// `ahead`: pages `(first, count)` the mover copies next; for a file,
    /// their read is started now, so that the device works on the next
    /// chunk while this one is copied and switched (two reads in flight
    /// instead of one synchronous read per chunk).
    fn copy_run(&self, first: usize, n: usize, ahead: Option<(usize, usize)>) -> Result<(), Errno> {
        let (off, len) = (first * self.page, n * self.page);
        let link_done = self.reserve_link(len);
        // One call faults the near pages in, instead of one fault per page
        // inside pread; best effort (pread faults what is left).
        let _ = self.staging.populate_write(off, len);
        let fd = self.source.backing.mover_fd();
        let mut done = 0;
        let file = self.source.backing.kind == far::FarKind::File;
        if first == 0 && file {
            // The program's first access wants page 0; a read of the whole
            // first chunk would keep that page locked until all of it came
            // from the device. Read page 0 alone first.
            done = self
                .staging
                .pread(fd, off, self.page, self.source.fd_offset + off as u64)?;
        }
        if let (true, Some((a, k))) = (file, ahead) {
            let start = if first == 0 { self.page } else { a * self.page };
            let end = (a + k) * self.page;
            // Best effort: without it the next read is synchronous.
            let _ =
                tiermem_sys::file::will_need(fd, self.source.fd_offset + start as u64, (end - start) as u64);
        }
        while done < len {
            let got = self.staging.pread(
                fd,
                off + done,
                len - done,
                self.source.fd_offset + (off + done) as u64,
            )?;
            if got == 0 {
                // The file shrank under us: its end reads as nothing.
                return Err(Errno(libc::EIO));
            }
            done += got;
        }
        if let Some(end) = link_done {
            self.wait_until(end);
        }
        Ok(())
    }

    /// Switches claimed, copied pages `first..first + n` to near and
    /// publishes them.
    fn switch_run(&self, first: usize, n: usize) -> Result<(), Errno> {
        let (off, len) = (first * self.page, n * self.page);
        if let Some(v) = &self.view {
            let t = Instant::now();
            self.staging
                .move_pages_to(off, len, &v.map, off)
                .map_err(|e| match e {
                    tiermem_sys::mm::MmError::Remap { errno, .. } => errno,
                    _ => Errno(libc::EINVAL),
                })?;
            // Relaxed: statistics.
            self.switch_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            self.switches.fetch_add(1, Ordering::Relaxed);
        }
        self.publish(first, n, NEAR);
        // AcqRel: the thread that counts the last page sees every other
        // publish before it finishes the job.
        let near = self.near.fetch_add(n, Ordering::AcqRel) + n;
        if near == self.pages {
            self.finish(DONE);
        }
        Ok(())
    }

    fn publish(&self, first: usize, n: usize, state: u8) {
        for s in &self.states[first..first + n] {
            // SeqCst: pairs with the waiter's SeqCst increment of
            // `page_waiters` and re-check of the state (no lost wake-up).
            s.store(state, Ordering::SeqCst);
        }
        self.changed.fetch_add(1, Ordering::SeqCst);
        if self.page_waiters.load(Ordering::SeqCst) > 0 {
            futex_wake(&self.changed, i32::MAX);
        }
    }

    fn finish(&self, how: u32) {
        // Relaxed: a statistic, read after `done` (Release below).
        self.done_ns.store(self.elapsed_ns(), Ordering::Relaxed);
        // Release: `wait` returning sees every page published before.
        if self
            .done
            .compare_exchange(RUNNING, how, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            futex_wake(&self.done, i32::MAX);
        }
    }

    fn fail(&self, first: usize, n: usize, op: u8, errno: Errno) {
        // The first failure wins; `error` reads both after `done` says
        // BROKEN, which `finish` below publishes with Release.
        if self
            .error_op
            .compare_exchange(0, op, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.error_errno.store(errno.raw(), Ordering::Release);
        }
        self.publish(first, n, FAILED);
        self.settle(n);
        self.finish(BROKEN);
    }

    /// Counts `n` pages copied; the copier of the last one runs the
    /// whole-region switch.
    fn settle(&self, n: usize) {
        if self.count_copied(n)
            && self.mode == Mode::Overshadow(Switch::Whole)
            && !self.cancel.load(Ordering::Relaxed)
        {
            self.switch_all_copied();
        }
    }

    /// The whole-region switch: every run of COPIED pages (normally one).
    fn switch_all_copied(&self) {
        let mut i = 0;
        while i < self.pages {
            let n = self.claim_run(i, self.pages, COPIED);
            if n == 0 {
                i += 1;
                continue;
            }
            if let Err(e) = self.switch_run(i, n) {
                self.fail(i, n, 2, e);
            }
            i += n;
        }
    }

    /// Copies (and, per mode, switches) claimed pages `first..first + n`.
    fn process_run(&self, first: usize, n: usize, ahead: Option<(usize, usize)>) {
        if let Err(e) = self.copy_run(first, n, ahead) {
            self.fail(first, n, 1, e);
            return;
        }
        match self.mode {
            Mode::Overshadow(Switch::Whole) => {
                self.publish(first, n, COPIED);
                self.settle(n);
            }
            Mode::Overshadow(Switch::PerPage) | Mode::Copy => {
                let _ = self.count_copied(n);
                if let Err(e) = self.switch_run(first, n) {
                    self.fail(first, n, 2, e);
                }
            }
        }
    }

    /// Counts `n` more pages copied (before they are switched, so that
    /// `copy_seconds` is set when `wait` returns); true for the last ones.
    fn count_copied(&self, n: usize) -> bool {
        let last = self.settled.fetch_add(n, Ordering::AcqRel) + n == self.pages;
        if last {
            self.copied_ns.store(self.elapsed_ns(), Ordering::Relaxed);
        }
        last
    }

    /// A mover's share: one chunk, split into runs of pages still far.
    fn move_chunk(&self, first: usize, n: usize) {
        let end = first + n;
        let mut ahead = (end < self.pages).then(|| (end, self.chunk_pages(end)));
        let mut i = first;
        while i < end {
            let run = self.claim_run(i, end, FAR);
            if run == 0 {
                i += 1; // taken by a write fault
                continue;
            }
            self.process_run(i, run, ahead.take());
            i += run;
        }
        self.chunks.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits while page `i` is CLAIMED (spinning first: a copy of a chunk
    /// takes microseconds, a wake-up across CPUs ~50 us).
    fn wait_page(&self, i: usize) {
        let backoff = Backoff::new();
        while self.states[i].load(Ordering::Acquire) == CLAIMED {
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            // SeqCst: Dekker with `publish` (state store, then waiters
            // load): either we see the new state or it sees us waiting.
            let seq = self.changed.load(Ordering::SeqCst);
            self.page_waiters.fetch_add(1, Ordering::SeqCst);
            if self.states[i].load(Ordering::SeqCst) == CLAIMED {
                futex_wait(&self.changed, seq, Some(Duration::from_millis(1)));
            }
            self.page_waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Serves a write to page `i` of `to`. Returns false if the write must
    /// fail (the page could not be copied).
    fn serve_write(&self, i: usize) -> bool {
        loop {
            match self.states[i].load(Ordering::Acquire) {
                NEAR => return true,
                FAILED => return false,
                CLAIMED => self.wait_page(i),
                FAR => {
                    let block = FORCE_BLOCK_BYTES / self.page;
                    let end = ((i / block + 1) * block).min(self.pages);
                    let n = self.claim_run(i, end, FAR);
                    if n > 0 {
                        self.forced_pages.fetch_add(n as u64, Ordering::Relaxed);
                        // Whole-region switch: this run switches now, alone.
                        if let Err(e) = self.copy_run(i, n, None) {
                            self.fail(i, n, 1, e);
                            return false;
                        }
                        let _ = self.count_copied(n);
                        if let Err(e) = self.switch_run(i, n) {
                            self.fail(i, n, 2, e);
                            return false;
                        }
                        self.after_forced_settle();
                        return true;
                    }
                }
                _ => {
                    // COPIED (whole-region switch): switch this page now.
                    if self.claim_run(i, i + 1, COPIED) == 1 {
                        self.forced_pages.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = self.switch_run(i, 1) {
                            self.fail(i, 1, 2, e);
                            return false;
                        }
                        return true;
                    }
                }
            }
        }
    }

    /// A forced copy may have been the last one of a whole-region switch.
    fn after_forced_settle(&self) {
        // Acquire: pairs with the AcqRel count of the other copiers, whose
        // COPIED pages the switch then moves. Two threads may both see the
        // last count and switch: claim_run gives each page to one of them.
        if self.settled.load(Ordering::Acquire) == self.pages && self.mode == Mode::Overshadow(Switch::Whole)
        {
            self.switch_all_copied();
        }
    }

    fn wait(&self) -> Result<(), Error> {
        let backoff = Backoff::new();
        loop {
            // Acquire: pairs with `finish`.
            match self.done.load(Ordering::Acquire) {
                RUNNING if !backoff.is_completed() => backoff.snooze(),
                RUNNING => futex_wait(&self.done, RUNNING, None),
                DONE => return Ok(()),
                _ => return Err(self.error()),
            }
        }
    }

    fn error(&self) -> Error {
        let errno = Errno(self.error_errno.load(Ordering::Acquire));
        let what = if self.error_op.load(Ordering::Acquire) == 1 {
            "overshadow: copying far memory"
        } else {
            "overshadow: switching pages to near memory"
        };
        if errno.raw() == libc::EIO {
            Error::Store(crate::store::StoreError::Read {
                offset: 0,
                len: self.pages * self.page,
                errno,
            })
        } else {
            Error::Sys { what, errno }
        }
    }

    fn stats(&self) -> OvershadowStats {
        // Relaxed: statistics, exact once `wait` returned.
        let secs = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 * 1e-9;
        OvershadowStats {
            chunks: self.chunks.load(Ordering::Relaxed),
            switches: self.switches.load(Ordering::Relaxed),
            forced_pages: self.forced_pages.load(Ordering::Relaxed),
            bytes_copied: (self.settled.load(Ordering::Relaxed) * self.page) as u64,
            copy_seconds: secs(&self.copied_ns),
            switch_seconds: secs(&self.switch_ns),
            done_seconds: secs(&self.done_ns),
        }
    }
}

// ---------------------------------------------------------------------------
// Mover threads
// ---------------------------------------------------------------------------

/// How many mover threads, and their CPUs; fixed when the first overshadow
/// starts them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoverConfig {
    /// Threads (default 1).
    pub movers: usize,
    /// CPUs to pin them to, round robin (default: the last online CPU, so a
    /// program on CPU 0 and the mover do not share one).
    pub cpus: Vec<usize>,
}

impl Default for MoverConfig {
    fn default() -> MoverConfig {
        let n = tiermem_sys::thread::online_cpus();
        MoverConfig {
            movers: 1,
            cpus: if n > 1 { vec![n - 1] } else { Vec::new() },
        }
    }
}

struct Engine {
    queue: Mutex<VecDeque<Arc<Job>>>,
    /// Bumped on every enqueue; idle movers wait on it.
    work: AtomicU32,
    idle: AtomicU32,
    config: MoverConfig,
}

static CONFIG: Mutex<Option<MoverConfig>> = Mutex::new(None);
static ENGINE: OnceLock<Result<&'static Engine, String>> = OnceLock::new();

/// Sets the mover threads before the first overshadow starts them.
pub fn configure_movers(config: MoverConfig) -> Result<(), Error> {
    if config.movers == 0 || config.movers > 64 {
        return Err(Error::Usage(format!(
            "{} overshadow movers: 1..=64",
            config.movers
        )));
    }
    let n = tiermem_sys::thread::online_cpus();
    if let Some(c) = config.cpus.iter().find(|&&c| c >= n) {
        return Err(Error::Usage(format!("mover CPU {c}: this machine has {n} CPUs")));
    }
    if ENGINE.get().is_some() {
        return Err(Error::Usage("overshadow movers already started".into()));
    }
    *CONFIG.lock().unwrap_or_else(|p| p.into_inner()) = Some(config);
    Ok(())
}

/// The mover configuration in force (or that will be, once started).
pub fn mover_config() -> MoverConfig {
    match ENGINE.get() {
        Some(Ok(e)) => e.config.clone(),
        _ => CONFIG
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default(),
    }
}

fn engine() -> Result<&'static Engine, Error> {
    ENGINE
        .get_or_init(|| {
            let config = mover_config();
            // Leaked on purpose: the mover threads live as long as the
            // process and hold it.
            let e: &'static Engine = Box::leak(Box::new(Engine {
                queue: Mutex::new(VecDeque::new()),
                work: AtomicU32::new(0),
                idle: AtomicU32::new(0),
                config: config.clone(),
            }));
            for k in 0..config.movers {
                crate::engine::spawn_runtime_thread(
                    "tiermem-overshadow",
                    k,
                    &config.cpus,
                    "an overshadow's pages would stay claimed",
                    move || mover_loop(e),
                )
                .map_err(|err| format!("starting overshadow mover {k}: {err}"))?;
            }
            Ok(e)
        })
        .clone()
        .map_err(Error::Usage)
}

fn mover_loop(e: &'static Engine) {
    loop {
        // Acquire: a job submitted before this load is in the queue we lock
        // next; one submitted after changes `work` and the futex returns.
        let seq = e.work.load(Ordering::Acquire);
        let job = {
            let mut q = e.queue.lock().unwrap_or_else(|p| p.into_inner());
            let mut picked = None;
            while let Some(j) = q.pop_front() {
                if j.has_chunks() {
                    // Round robin between overshadows in flight.
                    j.active.fetch_add(1, Ordering::AcqRel);
                    q.push_back(j.clone());
                    picked = Some(j);
                    break;
                }
            }
            picked
        };
        let Some(job) = job else {
            // SeqCst: Dekker with `submit` (work bump, then idle load).
            e.idle.fetch_add(1, Ordering::SeqCst);
            futex_wait(&e.work, seq, None);
            e.idle.fetch_sub(1, Ordering::SeqCst);
            continue;
        };
        if let Some((first, n)) = job.claim_chunk() {
            job.move_chunk(first, n);
        }
        // Release: `withdraw` (Acquire) sees the chunk's pages published.
        job.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Engine {
    fn submit(&self, job: Arc<Job>) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(job);
        // SeqCst: Dekker with the idle mover (idle bump, then work load).
        self.work.fetch_add(1, Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst) > 0 {
            futex_wake(&self.work, 1);
        }
    }

    /// Takes `job` off the queue and waits until no mover is inside it.
    fn withdraw(&self, job: &Arc<Job>) {
        job.cancel.store(true, Ordering::SeqCst);
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|j| !Arc::ptr_eq(j, job));
        while job.active.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

// ---------------------------------------------------------------------------
// The handle
// ---------------------------------------------------------------------------

/// One overshadow of far memory, destroyed (at any time) on drop.
pub struct Overshadow {
    job: Arc<Job>,
    /// `to`'s registration with the fault router (none for plain copies).
    routed: Option<RangeGuard>,
}

impl std::fmt::Debug for Overshadow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overshadow")
            .field("to", &format_args!("{:#x}", self.to()))
            .field("len", &self.len())
            .field("mode", &self.job.mode)
            .finish()
    }
}

impl Overshadow {
    /// Overshadows `size` bytes of far memory at `from` (page aligned, all
    /// inside one allocation of [`crate::far`]). The result's
    /// [`Overshadow::to`] is readable at once.
    pub fn create(from: usize, size: usize, opts: &Options) -> Result<Overshadow, Error> {
        Self::start(from, size, opts, Mode::Overshadow(opts.switch))
    }

    fn start(from: usize, size: usize, opts: &Options, mode: Mode) -> Result<Overshadow, Error> {
        let e = engine()?;
        let job = Arc::new(Job::new(from, size, opts, mode)?);
        let routed = match &job.view {
            Some(v) => Some(crate::fault::register(v.map.addr(), v.map.len(), job.clone())?),
            None => None,
        };
        e.submit(job.clone());
        Ok(Overshadow { job, routed })
    }

    /// The near address (`to`).
    pub fn to(&self) -> usize {
        self.view_map().addr()
    }

    /// `to` as a pointer (for C).
    pub fn as_ptr(&self) -> *mut u8 {
        self.view_map().as_ptr()
    }

    fn view_map(&self) -> &Mapping {
        self.job.view.as_ref().map_or(&self.job.staging, |v| &v.map)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.job.pages * self.job.page
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `to` as 64-bit atomics: loads see the far bytes until a page
    /// switches and the same bytes after; stores wait for their page.
    pub fn as_atomic_u64(&self) -> &[AtomicU64] {
        match &self.job.view {
            Some(v) => v.map.user_atomics(&v.user),
            None => self.job.staging.user_atomics(&self.job.staging_user),
        }
    }

    /// Waits until every page is near.
    pub fn wait(&self) -> Result<(), Error> {
        self.job.wait()
    }

    /// Whether every page is near (never blocks). A failed copy counts as
    /// finished: `wait` returns its error.
    pub fn test(&self) -> bool {
        self.job.done.load(Ordering::Acquire) != RUNNING
    }

    /// Whether the page holding byte `offset` of `to` is near.
    pub fn is_near(&self, offset: usize) -> bool {
        self.job
            .states
            .get(offset / self.job.page)
            .is_some_and(|s| s.load(Ordering::Acquire) == NEAR)
    }

    /// Pages near so far.
    pub fn near_pages(&self) -> usize {
        self.job.near.load(Ordering::Acquire)
    }

    /// What it did so far.
    pub fn stats(&self) -> OvershadowStats {
        self.job.stats()
    }
}

impl Drop for Overshadow {
    fn drop(&mut self) {
        if let Ok(e) = engine() {
            e.withdraw(&self.job);
        }
        // Returns once no write-fault handler runs on `to` any more.
        drop(self.routed.take());
        // Movers that withdrew may still drop their clones.
        while Arc::strong_count(&self.job) > 1 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// Plain DMA (the paper's baseline): copies `size` bytes of far memory at
/// `from` into a new near buffer with the same movers, chunks, huge pages
/// and link emulation as an overshadow, and returns when it is done. The
/// result's [`Overshadow::to`] is the near buffer.
pub fn copy_to_near(from: usize, size: usize, opts: &Options) -> Result<Overshadow, Error> {
    let c = start_copy_to_near(from, size, opts)?;
    c.wait()?;
    Ok(c)
}

/// [`copy_to_near`] without waiting: the copy is done when
/// [`Overshadow::test`] says so; reading the buffer before is reading
/// zeros or partial data.
pub fn start_copy_to_near(from: usize, size: usize, opts: &Options) -> Result<Overshadow, Error> {
    Overshadow::start(from, size, opts, Mode::Copy)
}

/// An overshadow serves write faults on its `to` (SIGSEGV: `to` is
/// read-only until a page switches): the page is copied and switched first.
impl FaultHandler for Job {
    fn on_fault(&self, f: &Fault) -> Served {
        let Some(view) = self.view.as_ref().filter(|_| f.signal == Signal::Segv) else {
            return Served::Forward;
        };
        if self.serve_write((f.addr - view.map.addr()) / self.page) {
            Served::Spurious
        } else {
            Served::Forward
        }
    }
}
