//! Fault-around: a demand fault outside any prefetch stream installs a
//! small cluster of missing neighbours with it, in the same UFFDIO_COPY
//! (one per run of untouched or far pages), when the thread's recent
//! faults show spatial locality (the kernel's fault-around for file pages,
//! made adaptive). Demand faults a prefetch stream takes are left to it.
//!
//! The cluster a fault calls for (its size from the thread's locality
//! score, its cap from the waste) comes from [`super::locality`]; this file
//! installs it. The cluster is the aligned window of that size around the
//! fault, narrowed to the contiguous pages
//! that are untouched or far (far ones only from a store that fetches runs
//! without staging) and can be locked at once: a busy neighbour ends the
//! cluster, nothing ever waits. Neighbours take free near slots only, and
//! never the last three (the faulting instruction may need three more
//! pages, see `progress`): the faulting page evicts as before when the
//! budget is full, its neighbours never evict.
//!
//! Install mode: a read fault installs the cluster write-protected (the
//! neighbours are `Clean`, their first write is a write-protect fault as
//! for any read fill); a write fault installs it writable, the neighbours
//! `Dirty` + VERIFY (eviction compares them with their far copy or with
//! zeros and writes back only those that changed), so a write sweep takes
//! no further fault on them.
//!
//! Accounting (see `locality`): the neighbours installed are marked;
//! a write-protect fault on one, or eviction finding it changed, counts it
//! used.

use super::locality::MAX_CLUSTER;
use super::{Outcome, RegionCore, Server};
use crate::page::{PageState, PageTable, PageWord};
use crate::stats::{Cost, FaultKind, FaultTimer};
use std::sync::atomic::Ordering;
use tiermem_sys::uffd::CopyMode;

/// The pages of a cluster around fault page `at`: `[first, end)`, every
/// page but `at` locked by the caller, with its word before locking.
pub(super) struct Cluster {
    at: usize,
    first: usize,
    end: usize,
    base: usize,
    words: [PageWord; MAX_CLUSTER],
}

impl Cluster {
    fn single(at: usize) -> Cluster {
        Cluster {
            at,
            first: at,
            end: at + 1,
            base: at,
            words: [PageWord::new(PageState::Untouched, false); MAX_CLUSTER],
        }
    }
    pub(super) fn len(&self) -> usize {
        self.end - self.first
    }
    fn word(&self, p: usize) -> PageWord {
        self.words[p - self.base]
    }
    fn neighbours(&self) -> impl Iterator<Item = (usize, PageWord)> + '_ {
        (self.first..self.end)
            .filter(move |&p| p != self.at)
            .map(|p| (p, self.word(p)))
    }
}

impl RegionCore {
    /// Locks the cluster a demand fault on page `i` (owned, was `w`, its
    /// near slot taken) should bring in with it, and takes free slots for
    /// the neighbours. A single page when fault-around is off, the page is
    /// not 4 KiB, a prefetch stream takes the fault, or the thread shows no
    /// locality.
    pub(super) fn claim_around(&self, i: usize, w: PageWord, tid: u32) -> Cluster {
        let mut c = Cluster::single(i);
        let Some(fa) = &self.around else {
            return c;
        };
        fa.refilled(i);
        fa.adapt(self.faulting_threads.many());
        let n = fa.window(tid, i).min(fa.cap());
        let far = w.state() == PageState::Far;
        if n < 2 || (far && self.staging.is_some()) {
            return c;
        }
        if self.prefetcher.as_ref().is_some_and(|pf| pf.claims(tid, i)) {
            return c;
        }
        let lo = i & !(n - 1);
        let hi = (lo + n).min(self.pages.len());
        c.base = lo;
        c.words[i - lo] = w;
        // Untouched and far pages mix (one copy per run of a kind); a store
        // that reads through per-page staging buffers cannot fetch a run on
        // the fault path: zero fills only there.
        let far_ok = self.staging.is_none();
        let take = |p: usize, c: &mut Cluster| {
            let nw = self.pages.load(p);
            let fits = match nw.state() {
                PageState::Untouched => true,
                PageState::Far => far_ok,
                _ => false,
            };
            if fits && self.pages.try_lock(p, nw) {
                c.words[p - lo] = nw;
                true
            } else {
                false
            }
        };
        while c.end < hi && take(c.end, &mut c) {
            c.end += 1;
        }
        while c.first > lo && take(c.first - 1, &mut c) {
            c.first -= 1;
        }
        let want = c.len() - 1;
        if want == 0 {
            return c;
        }
        // Free slots only, and never the last three: neighbours never
        // evict, and the instruction that faults may need three more pages
        // (MIN_NEAR_PAGES); on a budget of a few pages, clusters that took
        // them were evicted by its next fault, and its first page with
        // them, forever (issue 30).
        let room = self
            .free_slots()
            .saturating_sub(crate::config::MIN_NEAR_PAGES - 1);
        let got = if room == 0 {
            0
        } else {
            self.take_slots(want.min(room))
        };
        let mut excess = want - got;
        while excess > 0 && c.end > i + 1 {
            c.end -= 1;
            self.pages.unlock(c.end, c.word(c.end));
            excess -= 1;
        }
        while excess > 0 && c.first < i {
            self.pages.unlock(c.first, c.word(c.first));
            c.first += 1;
            excess -= 1;
        }
        for (p, _) in c.neighbours() {
            fa.refilled(p);
        }
        c
    }

    /// Fills a cluster claimed by [`Self::claim_around`] (more than one
    /// page) and publishes it: one UFFDIO_COPY per run of pages of one
    /// kind (one in all when the neighbours are all untouched or all far).
    /// None: the faulting page itself could not be installed; the
    /// neighbours that were are published, the others handed back, and the
    /// caller fills the page alone.
    pub(super) fn fill_cluster(
        &self,
        c: &Cluster,
        write: bool,
        tid: u32,
        server: Server,
        timer: &mut FaultTimer,
    ) -> Option<Outcome> {
        let ps = self.page_bytes;
        let mut ok = [false; MAX_CLUSTER];
        // A read of a page written during its last stay installs the
        // cluster writable, as a write does (the rewrite hint).
        let rewrite = !write && self.expects_rewrite(c.at, c.word(c.at));
        let writable = write || rewrite;
        let mode = CopyMode {
            write_protect: !writable,
            dont_wake: server == Server::InContext,
        };
        let mut at_read_failed = false;
        // Frame recycling (synchronous path): the cluster's leading pages
        // go into frames evicted earlier, moved into place (writable).
        let m = self
            .sync_ring()
            .map(|ring| {
                let mut run = [(0, PageWord::new(PageState::Untouched, false)); MAX_CLUSTER];
                for (k, p) in (c.first..c.end).enumerate() {
                    run[k] = (p, c.word(p));
                }
                self.install_by_move(ring, &run[..c.len()], timer)
            })
            .unwrap_or_default();
        ok[c.first - c.base..c.first - c.base + m.done]
            .iter_mut()
            .for_each(|x| *x = true);
        let was_moved = |p: usize| p < c.first + m.done;
        // Pages whose read failed (reported) are not read again.
        at_read_failed |= (c.first + m.done..c.first + m.resume_at()).contains(&c.at);
        let mut s = c.first + m.resume_at();
        while s < c.end {
            let far = c.word(s).state() == PageState::Far;
            let mut e = s + 1;
            while e < c.end && (c.word(e).state() == PageState::Far) == far {
                e += 1;
            }
            let (off, len) = (s * ps, (e - s) * ps);
            let src = if far {
                let r = self.store.fetch(off as u64, len, None);
                timer.lap(Cost::Transfer);
                // Reported like any failed read (io_errors and the error
                // log), once. The neighbours stay far, for their own demand
                // fills to try again; the faulting page, if in this run, is
                // poisoned below as a failed fill of it would be.
                match r {
                    Ok(src) => Some(src),
                    Err(err) => {
                        self.store_failed(off as u64, super::errors::OP_READ, &err);
                        at_read_failed |= (s..e).contains(&c.at);
                        None
                    }
                }
            } else {
                Some(self.zeros.range(0, len))
            };
            // Pages installed from the start of the run.
            let n = src.map_or(0, |src| self.copy_run(off, src, mode));
            timer.lap(Cost::Pte);
            ok[s - c.base..s - c.base + n].iter_mut().for_each(|x| *x = true);
            if far {
                self.stats.bytes_in.fetch_add((n * ps) as u64, Ordering::Relaxed);
            }
            s = e;
        }
        let is_ok = |p: usize| ok[p - c.base];
        {
            let mut policy = self.policy();
            for p in (c.first..c.end).filter(|&p| is_ok(p)) {
                policy.on_fill(p);
            }
        }
        let fa = self.around.as_ref().expect("a cluster needs fault-around");
        fa.installed_cluster(
            tid,
            c.first,
            c.end,
            c.neighbours().map(|(p, _)| p).filter(|&p| is_ok(p)),
        );
        timer.lap(Cost::LockList);
        let w = c.word(c.at);
        if is_ok(c.at) {
            // Record before publishing (see `fill`).
            let kind = if w.state() == PageState::Far {
                FaultKind::FarFill
            } else {
                FaultKind::ZeroFill
            };
            self.stats
                .record_fault(kind, tid, std::mem::replace(timer, FaultTimer::start()));
        }
        for (p, nw) in c.neighbours() {
            if is_ok(p) {
                let next = if writable || was_moved(p) {
                    // Installed writable but not written: dirty until
                    // eviction finds it unchanged.
                    PageWord::dirty_unverified(nw.far_valid())
                } else {
                    PageWord::new(PageState::Clean, nw.far_valid())
                };
                self.pages.unlock(p, next);
            } else {
                self.release_slots(1);
                self.pages.unlock(p, nw);
            }
        }
        if at_read_failed {
            self.release_slots(1);
            return Some(self.poison(c.at, w, server));
        }
        if !is_ok(c.at) {
            return None;
        }
        let next = if write {
            PageWord::new(PageState::Dirty, w.far_valid())
        } else if rewrite {
            self.count_rewrites((c.first..c.end).filter(|&p| is_ok(p)).count());
            PageWord::dirty_unverified(w.far_valid())
        } else if was_moved(c.at) {
            PageWord::dirty_unverified(w.far_valid())
        } else {
            PageWord::new(PageState::Clean, w.far_valid())
        };
        self.pages.unlock(c.at, next);
        Some(Outcome::Resolved)
    }
}

/// Whether page `p` of `table` is out of near memory (a marked install
/// there was evicted unused).
pub(crate) fn out_of_near(table: &PageTable, p: usize) -> bool {
    p < table.len() && matches!(table.load(p).state(), PageState::Untouched | PageState::Far)
}
