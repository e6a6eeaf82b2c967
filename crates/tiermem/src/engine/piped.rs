//! Dirty victims read through a pipe after their batch's unmap (issue 36):
//! which pages go into the pipe, and how they reach the far store.

use super::errors::OP_WRITE;
use super::scratch::{Splice, LANDING_PAGES};
use super::RegionCore;
use crate::page::PageWord;
use crate::store::StoreError;
use std::sync::atomic::Ordering;

impl RegionCore {
    /// Puts the dirty pages of a run into the splice pipe, in order, while
    /// it has room: marks in `piped` those it took (a prefix of them).
    ///
    /// Only pages installed from far data (`far_valid`): the pipe holds
    /// the page the pte maps, so that page must be the one a writer
    /// writes. A page first read as the shared zero page and then written
    /// is `Dirty` before the kernel gives the writer a page of its own
    /// (the copy-on-write after our unprotect): piped in between, the
    /// pipe would hold the zero page and the write would be lost (found
    /// by `tiermem run -- tiermem stress --plain`). Pages installed by
    /// UFFDIO_COPY or moved frames are the process's own from the start;
    /// after a fork they are shared copy-on-write too, hence
    /// `splice_wanted`'s rule for regions copied into children.
    #[inline(never)] // its arrays stay off the frame of the write-back (signal stacks)
    pub(super) fn pipe_dirty(
        &self,
        sp: &Splice,
        run: &[(usize, PageWord)],
        dirty: &[bool],
        piped: &mut [bool],
    ) {
        const RANGES: usize = 8;
        let ps = self.page_bytes;
        let first = run[0].0;
        let n = dirty.len();
        let pipeable = |k: usize| dirty[k] && run[k].1.far_valid();
        let mut s = 0;
        while s < n {
            // Up to RANGES dirty sub-runs, then one call.
            let mut ranges = [(0usize, 0usize); RANGES];
            let mut r = 0;
            let mut next = s;
            while next < n && r < RANGES {
                if !pipeable(next) {
                    next += 1;
                    continue;
                }
                let e = (next..n).find(|&j| !pipeable(j)).unwrap_or(n);
                ranges[r] = ((first + next) * ps, (e - next) * ps);
                r += 1;
                next = e;
            }
            if r == 0 {
                return;
            }
            let want: usize = ranges[..r].iter().map(|x| x.1).sum();
            let got = sp.pipe.take_pages(&self.mapping, &ranges[..r]).unwrap_or(0);
            let mut left = got / ps;
            for &(off, len) in &ranges[..r] {
                let p = off / ps - first;
                let k = (len / ps).min(left);
                piped[p..p + k].iter_mut().for_each(|x| *x = true);
                left -= k;
            }
            if got < want {
                // The pipe is full: the rest are write-protected first.
                return;
            }
            s = next;
        }
    }

    /// Writes back the piped pages of `run` (contiguous, unmapped now)
    /// from the splice pipe: straight into the far store where it reads
    /// pipes, else through the landing buffer, where pages marked VERIFY
    /// that still equal their far copy are not written (and no longer
    /// `dirty`). A page whose write-back fails is mapped back from its
    /// data, resident and dirty (`failed`).
    #[inline(never)]
    pub(super) fn write_back_piped(
        &self,
        sp: &Splice,
        run: &[(usize, PageWord)],
        dirty: &mut [bool],
        failed: &mut [bool],
    ) -> Option<StoreError> {
        let ps = self.page_bytes;
        let count = run.len();
        let first_page = run[0].0;
        let off = (first_page * ps) as u64;
        let verify = run.iter().any(|(_, w)| w.verify());
        if !verify {
            match self.store.store_from_pipe(off, &sp.pipe, count * ps) {
                Some(Ok(())) => {
                    self.count_write_back(count * ps);
                    self.stats
                        .write_backs_piped
                        .fetch_add(count as u64, Ordering::Relaxed);
                    return None;
                }
                // Nothing was read: land the data and map it back.
                Some(Err(err)) => self.store_failed(off, OP_WRITE, &err),
                None => {}
            }
        }
        let mut first_error = None;
        let mut done = 0;
        while done < count {
            let k = (count - done).min(LANDING_PAGES);
            sp.pipe
                .read_exact_into(&sp.landing, 0, k * ps)
                .expect("reading evicted pages back from the splice pipe");
            for j in done..done + k {
                let (p, w) = run[j];
                if w.verify() && self.unchanged(p, w, sp.landing.range((j - done) * ps, ps)) {
                    dirty[j] = false;
                }
            }
            // The pages still dirty, contiguous ones with one call.
            let mut a = done;
            while a < done + k {
                if !dirty[a] {
                    a += 1;
                    continue;
                }
                let b = (a..done + k).find(|&j| !dirty[j]).unwrap_or(done + k);
                let data = sp.landing.range((a - done) * ps, (b - a) * ps);
                match self.write_back(first_page + a, data) {
                    Ok(()) => {
                        self.stats
                            .write_backs_piped
                            .fetch_add((b - a) as u64, Ordering::Relaxed);
                    }
                    Err(err) => {
                        self.copy_in((first_page + a) * ps, data, false, false)
                            .expect("mapping back a page whose write-back failed");
                        failed[a..b].iter_mut().for_each(|f| *f = true);
                        first_error.get_or_insert(err);
                    }
                }
                a = b;
            }
            done += k;
        }
        first_error
    }
}
