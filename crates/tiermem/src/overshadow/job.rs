//! One overshadow's copy job: claiming, copying and switching pages, and
//! serving the write faults on `to` that get ahead of it.

use super::*;

impl Job {
    pub(super) fn new(from: usize, size: usize, opts: &Options, mode: Mode) -> Result<Job, Error> {
        let page = base_page_size();
        if size == 0 {
            return Err(Error::Usage("overshadow of 0 bytes".into()));
        }
        if !from.is_multiple_of(page) || !size.is_multiple_of(page) {
            return Err(Error::Usage(format!(
                "overshadow of {size} bytes at {from:#x}: address and size must be multiples of {page}"
            )));
        }
        let min = opts.chunk_min_bytes;
        let max = opts.chunk_max_bytes;
        if min < page || !min.is_multiple_of(page) || max < min || !max.is_multiple_of(page) {
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

    pub(super) fn elapsed_ns(&self) -> u64 {
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
    pub(super) fn reserve_link(&self, bytes: usize) -> Option<u64> {
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
    pub(super) fn wait_until(&self, end: u64) {
        while self.elapsed_ns() < end {
            std::hint::spin_loop();
        }
    }

    /// Pages in the chunk that starts at page `start`: chunks double from
    /// the minimum (256 KiB, 256 KiB, 512 KiB, ...), so the first pages switch
    /// early and large regions take few switches; once at the maximum they
    /// stay aligned to it.
    pub(super) fn chunk_pages(&self, start: usize) -> usize {
        start
            .clamp(self.chunk_min_pages, self.chunk_max_pages)
            .min(self.pages - start)
    }

    /// Claims the next chunk for a mover: `(first page, pages)`.
    pub(super) fn claim_chunk(&self) -> Option<(usize, usize)> {
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

    pub(super) fn has_chunks(&self) -> bool {
        // Relaxed: a hint; claim_chunk and the page states decide.
        self.cursor.load(Ordering::Relaxed) < self.pages && !self.cancel.load(Ordering::Relaxed)
    }

    /// Claims pages `first..` while they are in state `from`, up to `end`.
    /// Returns how many (0 if `first` itself was not `from`).
    pub(super) fn claim_run(&self, first: usize, end: usize, from: u8) -> usize {
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
    pub(super) fn copy_run(
        &self,
        first: usize,
        n: usize,
        ahead: Option<(usize, usize)>,
    ) -> Result<(), Errno> {
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
    pub(super) fn switch_run(&self, first: usize, n: usize) -> Result<(), Errno> {
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

    pub(super) fn publish(&self, first: usize, n: usize, state: u8) {
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

    pub(super) fn finish(&self, how: u32) {
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

    pub(super) fn fail(&self, first: usize, n: usize, op: u8, errno: Errno) {
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
    pub(super) fn settle(&self, n: usize) {
        if self.count_copied(n)
            && self.mode == Mode::Overshadow(Switch::Whole)
            && !self.cancel.load(Ordering::Relaxed)
        {
            self.switch_all_copied();
        }
    }

    /// The whole-region switch: every run of COPIED pages (normally one).
    pub(super) fn switch_all_copied(&self) {
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
    pub(super) fn process_run(&self, first: usize, n: usize, ahead: Option<(usize, usize)>) {
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
    pub(super) fn count_copied(&self, n: usize) -> bool {
        let last = self.settled.fetch_add(n, Ordering::AcqRel) + n == self.pages;
        if last {
            self.copied_ns.store(self.elapsed_ns(), Ordering::Relaxed);
        }
        last
    }

    /// A mover's share: one chunk, split into runs of pages still far.
    pub(super) fn move_chunk(&self, first: usize, n: usize) {
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
    pub(super) fn wait_page(&self, i: usize) {
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
    pub(super) fn serve_write(&self, i: usize) -> bool {
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
    pub(super) fn after_forced_settle(&self) {
        // Acquire: pairs with the AcqRel count of the other copiers, whose
        // COPIED pages the switch then moves. Two threads may both see the
        // last count and switch: claim_run gives each page to one of them.
        if self.settled.load(Ordering::Acquire) == self.pages && self.mode == Mode::Overshadow(Switch::Whole)
        {
            self.switch_all_copied();
        }
    }

    pub(super) fn wait(&self) -> Result<(), Error> {
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

    pub(super) fn error(&self) -> Error {
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

    pub(super) fn stats(&self) -> OvershadowStats {
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
