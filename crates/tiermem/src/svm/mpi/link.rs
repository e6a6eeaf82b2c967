//! [`MpiLink`] as the protocol's [`Transport`]: node-local pages through
//! the node's files, remote ones through the MPI windows.

use super::*;

impl Transport for MpiLink {
    fn node(&self) -> &LocalShm {
        &self.node
    }

    fn is_local(&self, page: usize) -> bool {
        self.node_of[self.home(page)] == self.my_node
    }

    fn home_run(&self, first: usize, max: usize) -> usize {
        let h = self.home(first);
        (first..(first + max).min(self.homes.len()))
            .take_while(|&q| self.home(q) == h)
            .count()
    }

    fn version(&self, page: usize) -> u64 {
        if self.is_local(page) {
            return self.node.version(page);
        }
        let mut v = Vec::new();
        match self.versions(&[page], &mut v) {
            Ok(()) => v[0],
            // An unreadable version reads as "changed": the copy is refetched
            // (and the fetch reports the error).
            Err(_) => u64::MAX,
        }
    }

    fn bump_version(&self, page: usize) -> u64 {
        if self.is_local(page) {
            let v = self.node.bump_version(page);
            self.record(page, v + 1);
            return v;
        }
        let mut v = Vec::new();
        match self.bump_versions(&[page], &mut v) {
            Ok(()) => v[0],
            Err(_) => u64::MAX,
        }
    }

    fn add_cacher(&self, page: usize, rank: usize) -> u64 {
        self.node.add_cacher(page, rank)
    }

    fn remove_cacher(&self, page: usize, rank: usize) {
        let _ = self.remove_cachers(&[page], rank);
    }

    fn cachers(&self, page: usize) -> u64 {
        if self.is_local(page) {
            return self.node.cachers(page);
        }
        let mut v = [0u64];
        let disp = self.disp(|m| m.dsm_mask(page));
        match self.get_meta_words(self.home(page), disp, &mut v) {
            Ok(()) => v[0],
            Err(_) => u64::MAX,
        }
    }

    /// A ticket lock (see [`ticket`]): one atomic add takes a ticket, the
    /// rank then waits until its ticket is served, so waiters are served
    /// in arrival order whichever node they are on, and a waiting rank
    /// only reads the word (no compare-and-swap storm on a contended lock).
    fn lock(&self, id: usize, rank: usize) -> Result<(), Error> {
        let word = self.lock_word(id);
        let mine = rank as u64 + 1;
        if ticket::holder(word.read()?) == mine {
            return Err(Error::Usage(format!("lock {id} is already held by this process")));
        }
        let my_ticket = ticket::next(word.fetch_add(ticket::NEXT_ONE)?);
        let mut backoff = Backoff::new(Duration::from_micros(20));
        let (start, mut last) = (Instant::now(), Instant::now());
        let mut cur = word.read()?;
        loop {
            if ticket::serving(cur) == my_ticket && ticket::holder(cur) == 0 {
                // Our turn: record the holder (the ticket counter may move
                // under us, hence the loop). Acquire (local) or the flush
                // (remote): the previous holder's release happens before
                // our critical section.
                let old = word.compare_swap(cur, ticket::claimed(cur, mine))?;
                if old == cur {
                    break;
                }
                cur = old;
                continue;
            }
            backoff.snooze();
            if last.elapsed() > Duration::from_millis(10) {
                last = Instant::now();
                let holder = ticket::holder(cur);
                let ahead = ticket::ahead(cur, my_ticket);
                self.check_peers(start, &|| match holder {
                    0 => format!("waiting for lock {id} ({ahead} ahead)"),
                    h => format!("waiting for lock {id} (held by rank {}, {ahead} ahead)", h - 1),
                })?;
            }
            cur = word.read()?;
        }
        if matches!(word, LockWord::Remote { .. }) {
            // Relaxed: this thread's own bookkeeping.
            self.held[id].store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    fn unlock(&self, id: usize, rank: usize) -> Result<(), Error> {
        let word = self.lock_word(id);
        let mine = rank as u64 + 1;
        let mut cur = word.read()?;
        loop {
            if ticket::holder(cur) != mine {
                return Err(Error::Usage(format!(
                    "unlock of lock {id}, which this process does not hold"
                )));
            }
            // Release (local) or the flush (remote): our diffs and notices
            // happen before the next holder's claim.
            let old = word.compare_swap(cur, ticket::released(cur))?;
            if old == cur {
                break;
            }
            cur = old;
        }
        if matches!(word, LockWord::Remote { .. }) {
            self.held[id].store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    fn lock_holder(&self, id: usize) -> Result<u64, Error> {
        if !self.lock_home(id).1 && self.held[id].load(Ordering::Relaxed) {
            // Relaxed: this thread's own bookkeeping (no round trip).
            return Ok(self.rank as u64 + 1);
        }
        Ok(ticket::holder(self.lock_word(id).read()?))
    }

    fn publish_notices(&self, id: usize, pages: &[u32]) -> Result<(), Error> {
        let (home, local) = self.lock_home(id);
        if local {
            return self.node.publish_notices(id, pages);
        }
        if pages.is_empty() {
            return Ok(());
        }
        // We hold the lock: nobody else writes its ring or head, which our
        // acquire read.
        let r = self.remote()?;
        // Relaxed: this thread's own bookkeeping.
        let head = self.heads[id].load(Ordering::Relaxed);
        // The newest NOTICE_CAP notices fit; older ones would be overwritten
        // anyway (readers that far behind see an overflow).
        let skip = pages.len().saturating_sub(NOTICE_CAP);
        let from = head + skip as u64;
        let entries: Vec<u64> = pages[skip..].iter().map(|&p| p as u64).collect();
        let slot = (from % NOTICE_CAP as u64) as usize;
        let first_len = entries.len().min(NOTICE_CAP - slot);
        // Entries and head in one flush: readers read them only under the
        // lock, which is released after the flush.
        let new_head = [head + pages.len() as u64];
        let mut b = r.meta.batch();
        b.put_words(home, self.disp(|m| m.notice(id, from)), &entries[..first_len])?;
        if first_len < entries.len() {
            b.put_words(home, self.disp(|m| m.notice(id, 0)), &entries[first_len..])?;
        }
        b.put_words(home, self.disp(|m| m.notice_head(id)), &new_head)?;
        b.flush()?;
        self.net(3, 1, 0, 8 * (entries.len() + 1));
        self.heads[id].store(new_head[0], Ordering::Relaxed);
        Ok(())
    }

    fn notices_since(&self, id: usize, seen: u64, out: &mut Vec<u32>) -> Result<Notices, Error> {
        let (home, local) = self.lock_home(id);
        if local {
            return self.node.notices_since(id, seen, out);
        }
        // The head and the whole ring in one get (they are adjacent).
        let mut buf = vec![0u64; 1 + NOTICE_CAP];
        self.get_meta_words(home, self.disp(|m| m.notice_head(id)), &mut buf)?;
        let head = buf[0];
        // Relaxed: this thread's own bookkeeping (we hold the lock).
        self.heads[id].store(head, Ordering::Relaxed);
        if head - seen.min(head) > NOTICE_CAP as u64 {
            return Ok(Notices::Overflow(head));
        }
        let ring = &buf[1..];
        out.extend((seen.min(head)..head).map(|s| ring[(s % NOTICE_CAP as u64) as usize] as u32));
        Ok(Notices::Since(head))
    }

    fn notice_heads(&self, out: &mut Vec<u64>) -> Result<(), Error> {
        out.clear();
        out.resize(MAX_LOCKS, 0);
        let m = self.node.meta();
        let mut remote = Vec::new();
        for (id, o) in out.iter_mut().enumerate() {
            let (home, local) = self.lock_home(id);
            if local {
                *o = m.notice_head(id).load(Ordering::Acquire);
            } else {
                remote.push((home, self.disp(|m| m.notice_head(id)), o));
            }
        }
        if !remote.is_empty() {
            let r = self.remote()?;
            let mut b = r.meta.batch();
            for (home, disp, o) in remote {
                b.get_words(home, disp, std::slice::from_mut(o))?;
            }
            b.flush()?;
            self.net(MAX_LOCKS as u64, 1, 8 * MAX_LOCKS, 0);
        }
        Ok(())
    }

    fn read_home(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        let ps = self.node.page_bytes;
        let mut at = 0;
        while at < out.len() {
            let off = offset + at;
            let page = off / ps;
            let len = (ps - off % ps).min(out.len() - at);
            if self.is_local(page) {
                self.node.home.copy_out(off, &mut out[at..at + len]);
            } else {
                let r = self.remote()?;
                let mut b = r.data.batch();
                b.get_bytes(self.home(page), off, &mut out[at..at + len])?;
                b.flush()?;
                self.net(1, 1, len, 0);
            }
            at += len;
        }
        Ok(())
    }

    fn fetch_remote(
        &self,
        first: usize,
        n: usize,
        rank: usize,
        cacher: bool,
        dst: &Mapping,
        versions: &mut [u64],
    ) -> Result<(), Error> {
        // Runs in the fault handler: no allocation here (stack arrays).
        let r = self.remote()?;
        let home = self.home(first);
        let bit = 1u64 << rank;
        let mut before = [u64::MAX; 8];
        assert!(n <= before.len() && versions.len() >= n, "fetch of {n} pages");
        let mut adds = 0;
        {
            // The cacher bits and the versions in one flush (the version
            // read may see the state before or after the bits: both are
            // older than the data read below).
            let mut b = r.meta.batch();
            if cacher {
                for (k, slot) in before[..n].iter_mut().enumerate() {
                    let p = first + k;
                    // Relaxed: this thread's own bookkeeping.
                    if !self.in_mask[p].swap(true, Ordering::Relaxed) {
                        b.fetch_add(home, self.disp(|m| m.dsm_mask(p)), &bit, slot)?;
                        adds += 1;
                    }
                }
            }
            b.get_words(home, self.disp(|m| m.version(first)), &mut versions[..n])?;
            b.flush()?;
        }
        let mut flushes = 2;
        if before[..n].contains(&0) {
            // The page became DSM-cached: the home node's SPM writers must
            // start tracking it before we copy (see LocalShm::add_cacher).
            let (one, mut old) = (1u64, 0u64);
            let mut b = r.meta.batch();
            b.fetch_add(home, self.disp(|m| m.h(meta::H_DSM_EPOCH)), &one, &mut old)?;
            b.flush()?;
            adds += 1;
            flushes += 1;
        }
        // Versions before data: a copy is never newer than its version says.
        let ps = self.node.page_bytes;
        let mut b = r.data.batch();
        b.get(home, first * ps, dst, first * ps, n * ps)?;
        b.flush()?;
        let m = self.node.meta();
        m.add(self.rank, Stat::NetFetchPages as usize, n as u64);
        self.net(
            adds + 2,
            flushes,
            n * ps + 8 * (n + adds as usize),
            8 * adds as usize,
        );
        Ok(())
    }

    fn apply_remote_diffs(
        &self,
        pages: &[usize],
        heap: &Mapping,
        twin: &Mapping,
        out: &mut Vec<(usize, usize)>,
    ) -> Result<(), Error> {
        out.clear();
        if pages.is_empty() {
            return Ok(());
        }
        let r = self.remote()?;
        let ps = self.node.page_bytes;
        // Runs of every page, then per home: a few runs go as one put each;
        // many (a page of sorted keys has ~1000) go packed to the home's
        // inbox, one message per packet instead of one per run.
        let mut runs: Vec<Vec<(u32, u32)>> = Vec::with_capacity(pages.len());
        for &p in pages {
            let mut rr = Vec::new();
            let bytes = heap.range(p * ps, ps).diff_runs(twin.range(p * ps, ps), &mut rr);
            out.push((bytes, rr.len()));
            runs.push(rr);
        }
        let mut homes: Vec<usize> = pages.iter().map(|&p| self.home(p)).collect();
        homes.sort_unstable();
        homes.dedup();
        let mut b = r.data.batch();
        let (mut puts, mut sent) = (0, 0);
        for h in homes {
            let mine: Vec<usize> = (0..pages.len())
                .filter(|&i| self.home(pages[i]) == h && out[i].0 > 0)
                .collect();
            let total: usize = mine.iter().map(|&i| runs[i].len()).sum();
            if total <= DIRECT_RUNS {
                for &i in &mine {
                    b.put_runs(h, pages[i] * ps, heap.range(pages[i] * ps, ps), &runs[i])?;
                    puts += 1;
                    sent += out[i].0;
                }
                continue;
            }
            let mut packet = Vec::new();
            for &i in &mine {
                let rec = 8 + 4 * runs[i].len() + out[i].0;
                if !packet.is_empty() && 8 + packet.len() + rec > SLOT_DATA {
                    self.send_packet(h, &packet)?;
                    packet.clear();
                }
                pack(&mut packet, pages[i], heap.range(pages[i] * ps, ps), &runs[i]);
            }
            if !packet.is_empty() {
                self.send_packet(h, &packet)?;
            }
        }
        b.flush()?;
        self.net(puts, 1, 0, sent);
        Ok(())
    }

    fn versions(&self, pages: &[usize], out: &mut Vec<u64>) -> Result<(), Error> {
        out.clear();
        out.resize(pages.len(), 0);
        let mut batch = None;
        let mut rest: &mut [u64] = out;
        let mut i = 0;
        while i < pages.len() {
            let p = pages[i];
            if self.is_local(p) {
                let (one, tail) = rest.split_at_mut(1);
                one[0] = self.node.version(p);
                rest = tail;
                i += 1;
                continue;
            }
            // A run of consecutive pages with one home: one get.
            let h = self.home(p);
            let mut n = 1;
            while i + n < pages.len() && pages[i + n] == p + n && self.home(p + n) == h {
                n += 1;
            }
            let (seg, tail) = rest.split_at_mut(n);
            rest = tail;
            let b = match &mut batch {
                Some(b) => b,
                None => batch.insert(self.remote()?.meta.batch()),
            };
            b.get_words(h, self.disp(|m| m.version(p)), seg)?;
            self.net(1, 0, 8 * n, 0);
            i += n;
        }
        if let Some(b) = batch {
            b.flush()?;
            self.net(0, 1, 0, 0);
        }
        Ok(())
    }

    fn bump_versions(&self, pages: &[usize], before: &mut Vec<u64>) -> Result<(), Error> {
        before.clear();
        before.resize(pages.len(), 0);
        self.fetch_add_remote(
            pages,
            1,
            before,
            |m, p| m.version(p),
            |p, b0| {
                if !self.is_local(p) {
                    return true;
                }
                *b0 = self.node.bump_version(p);
                self.record(p, *b0 + 1);
                false
            },
        )?;
        for (&p, &b0) in pages.iter().zip(before.iter()) {
            if !self.is_local(p) {
                self.record(p, b0 + 1);
            }
        }
        Ok(())
    }

    fn remove_cachers(&self, pages: &[usize], rank: usize) -> Result<(), Error> {
        let neg = (1u64 << rank).wrapping_neg();
        let mut olds = vec![0u64; pages.len()];
        self.fetch_add_remote(
            pages,
            neg,
            &mut olds,
            |m, p| m.dsm_mask(p),
            |p, _| {
                if self.is_local(p) {
                    self.node.remove_cacher(p, rank);
                    return false;
                }
                // Relaxed: this thread's own bookkeeping.
                self.in_mask[p].swap(false, Ordering::Relaxed)
            },
        )
    }
}

impl MpiLink {
    /// Adds `add` to one metadata word (`word`) of pages homed on other
    /// nodes: one `MPI_Fetch_and_op` each, in one batch closed by one flush;
    /// the old values land in `old` (one per page). `local` sees every page
    /// first (and its slot of `old`), serves those of this node itself, and
    /// says whether the page still needs the remote add.
    fn fetch_add_remote(
        &self,
        pages: &[usize],
        add: u64,
        old: &mut [u64],
        word: impl for<'a> Fn(Meta<'a>, usize) -> &'a AtomicU64,
        mut local: impl FnMut(usize, &mut u64) -> bool,
    ) -> Result<(), Error> {
        let mut batch = None;
        for (&p, o) in pages.iter().zip(old.iter_mut()) {
            if !local(p, o) {
                continue;
            }
            let b = match &mut batch {
                Some(b) => b,
                None => batch.insert(self.remote()?.meta.batch()),
            };
            b.fetch_add(self.home(p), self.disp(|m| word(m, p)), &add, o)?;
            self.net(1, 0, 8, 8);
        }
        if let Some(b) = batch {
            b.flush()?;
            self.net(0, 1, 0, 0);
        }
        Ok(())
    }
}
