//! Fault-triggered prefetch: per-thread stream detection with adaptive
//! depth, in the manner of Linux readahead, with user-space signals only.
//!
//! Each demand fault is fed to the detector with the faulting thread's id.
//! A thread's last eight fault pages are kept; a fault at `p` that extends
//! an arithmetic progression among them (`p - d`, `p - 2d`, |d| <= 64
//! pages, forward or backward) starts a stream of stride `d`. A stream
//! prefetches a window of `depth` pages ahead of the thread, but leaves one
//! page in the middle of the window unfilled: the *trigger*. When the thread
//! reaches it, its demand fault (the only one per half window) fires the next
//! window, doubling `depth` up to the current cap. This is the readahead
//! marker of Linux's page cache; in user space only a fault makes an access
//! visible, so the marker is a page left missing on purpose.
//!
//! Accounting: every prefetched page carries a `PREFETCHED` bit. When a
//! trigger fires, the pages the thread has passed since the last trigger
//! are *used* (bits cleared); a page evicted with its bit still set was
//! *wasted*. The cap on `depth` adapts to the waste ratio of recent
//! windows: halved above 25% waste (down to 4 pages), doubled below 5%.
//! An unused prefetched page that eviction spares once (see `evict.rs`)
//! counts as waste here: it reached the head of the replacement order
//! unused, and the spare would otherwise hide the waste from this count.
//!
//! Everything is allocation-free (fixed tables, results on the stack): it
//! runs inside the SIGBUS handler.

use crate::page::{PageState, PageTable};
use std::sync::atomic::{AtomicIsize, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// A range of pages to fill: `count` pages from `first`, `stride` apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) first: usize,
    pub(crate) count: usize,
    pub(crate) stride: isize,
    /// The stream writes: install writable (no write-protect fault later).
    pub(crate) write: bool,
    /// The stream that asked (1 + its slot; 0: none) and the slot's
    /// generation then: a mover skips pages that stream's thread has
    /// already passed (`Prefetcher::passed`).
    pub(crate) stream: u32,
    pub(crate) generation: u32,
}

/// Up to four requests, on the stack, and what the faulting thread should
/// fill itself (`inline`, count 0 if nothing).
#[derive(Default)]
pub(crate) struct Requests {
    items: [Request; 4],
    n: usize,
    pub(crate) inline: Request,
}

impl Requests {
    fn push(&mut self, r: Request) {
        if r.count > 0 && self.n < self.items.len() {
            self.items[self.n] = r;
            self.n += 1;
        }
    }
    pub(crate) fn as_slice(&self) -> &[Request] {
        &self.items[..self.n]
    }
}

const HISTORY: usize = 8;
const STREAMS: usize = 4;
const THREADS: usize = 32;
const MAX_STRIDE: isize = 64;
/// First window of a new stream, in pages.
pub(crate) const INITIAL_DEPTH: usize = 16;
const ADVICE_SLOTS: usize = 16;
/// The most pages a thread that caught up with the movers fills itself, up
/// to its stream's trigger (see `detect`); never more than the largest
/// window.
pub(crate) const CATCH_UP: usize = 64;
/// The smallest cap: windows that still waste at this size are muted.
const FLOOR: usize = 4;
/// While muted, one window in this many is still issued (a probe: its
/// waste, or its use, moves the cap again).
const PROBE_EVERY: u64 = 16;

/// The largest window is at most this share of the near budget (1/16):
/// a window of hundreds of pages over a budget of a few hundred evicts the
/// working set to make room for pages the thread may never reach (NPB's
/// SP.W at a 700-page budget: 512-page windows, 6% of prefetched pages
/// used, twice the evictions of no prefetch at all).
pub(crate) const BUDGET_SHARE: usize = 16;

/// Where a stream's thread is, readable without the detector's lock.
#[derive(Default)]
struct Progress {
    /// Bumped whenever the slot gets a new stream.
    generation: AtomicU32,
    /// The thread's last fault position in the stream.
    pos: AtomicIsize,
    /// The stream runs backward in memory.
    backward: std::sync::atomic::AtomicBool,
}

#[derive(Clone, Copy, Default)]
struct Stream {
    live: bool,
    stride: isize,
    /// The thread's last known position.
    pos: isize,
    /// The page left missing in the current window.
    trigger: isize,
    /// The next page to prefetch (exclusive frontier).
    end: isize,
    depth: usize,
    write: bool,
    last_used: u64,
}

#[derive(Clone, Copy, Default)]
struct ThreadState {
    tid: u32,
    last_used: u64,
    hist: [isize; HISTORY],
    hlen: usize,
    hpos: usize,
    streams: [Stream; STREAMS],
}

/// Access advice for a range (`tm_advise`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Back to the default heuristics.
    Normal,
    /// Sequential access expected: prefetch aggressively from the first fault.
    Sequential,
    /// Random access expected: do not prefetch.
    Random,
    /// The range will be needed soon: prefetch it now.
    WillNeed,
    /// The range will not be needed soon: evict it now (its data is kept).
    DontNeed,
}

#[derive(Clone, Copy)]
struct AdviceRange {
    first: usize,
    end: usize,
    advice: Advice,
}

struct Detector {
    tick: u64,
    threads: [ThreadState; THREADS],
    advice: [Option<AdviceRange>; ADVICE_SLOTS],
    /// (issued, wasted) when the cap was last adapted.
    checkpoint: (u64, u64),
}

/// The prefetcher of one region.
pub(crate) struct Prefetcher {
    detector: Mutex<Detector>,
    /// One per stream slot (thread slot * STREAMS + stream).
    progress: Box<[Progress]>,
    pages: usize,
    max_depth: usize,
    /// Windows at the floor still wasted: issue only on probes (`detect`).
    muted: std::sync::atomic::AtomicBool,
    /// Windows not issued while muted (every PROBE_EVERY-th is).
    skipped: AtomicU64,
    /// `CATCH_UP`, or the largest window if smaller.
    catch_up: usize,
    cap: AtomicUsize,
    pub(crate) issued: AtomicU64,
    pub(crate) used: AtomicU64,
    pub(crate) wasted: AtomicU64,
    pub(crate) dropped: AtomicU64,
    /// Demand faults on a trigger page.
    pub(crate) triggers: AtomicU64,
    /// Demand faults inside an issued window, not on its trigger.
    pub(crate) late: AtomicU64,
    /// Halvings of the cap.
    pub(crate) shrinks: AtomicU64,
    /// Pages late-faulting threads filled themselves (`Requests::inline`).
    pub(crate) inline: AtomicU64,
    /// Prefetched, unused victims given a second chance by eviction.
    pub(crate) spared: AtomicU64,
    /// Requested pages a mover skipped because the stream's thread had
    /// passed them by the time it got there (and they were not resident:
    /// evicted behind the thread, which a replacement policy that keeps
    /// the start of a sweep does on purpose).
    pub(crate) stale: AtomicU64,
}

impl Prefetcher {
    pub(crate) fn new(pages: usize, max_depth: usize) -> Prefetcher {
        let max_depth = max_depth.clamp(4, crate::config::MAX_EVICT_BATCH * 4);
        Prefetcher {
            progress: (0..THREADS * STREAMS).map(|_| Progress::default()).collect(),
            detector: Mutex::new(Detector {
                tick: 0,
                threads: [ThreadState::default(); THREADS],
                advice: [None; ADVICE_SLOTS],
                checkpoint: (0, 0),
            }),
            pages,
            max_depth,
            catch_up: CATCH_UP.min(max_depth),
            muted: std::sync::atomic::AtomicBool::new(false),
            skipped: AtomicU64::new(0),
            cap: AtomicUsize::new(max_depth),
            issued: AtomicU64::new(0),
            used: AtomicU64::new(0),
            wasted: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            triggers: AtomicU64::new(0),
            late: AtomicU64::new(0),
            shrinks: AtomicU64::new(0),
            inline: AtomicU64::new(0),
            spared: AtomicU64::new(0),
            stale: AtomicU64::new(0),
        }
    }

    /// Whether the thread of the stream that issued `r` has already passed
    /// `page` (a stale request: a mover that fell behind). False when the
    /// request came from no stream, or its slot holds another stream now.
    pub(crate) fn passed(&self, r: &Request, page: usize) -> bool {
        let Some(p) = (r.stream as usize)
            .checked_sub(1)
            .and_then(|k| self.progress.get(k))
        else {
            return false;
        };
        if p.generation.load(Ordering::Acquire) != r.generation {
            return false;
        }
        let pos = p.pos.load(Ordering::Relaxed);
        if p.backward.load(Ordering::Relaxed) {
            page as isize >= pos
        } else {
            page as isize <= pos
        }
    }

    /// Slot `k` gets a new stream starting at `pos`.
    fn restart(&self, k: usize, pos: isize, stride: isize) {
        let p = &self.progress[k];
        p.pos.store(pos, Ordering::Relaxed);
        p.backward.store(stride < 0, Ordering::Relaxed);
        p.generation.fetch_add(1, Ordering::Release);
    }

    /// Records advice for `[first, end)`. `Normal` clears advice there.
    pub(crate) fn set_advice(&self, first: usize, end: usize, advice: Advice) {
        let mut d = self.detector.lock().unwrap_or_else(|p| p.into_inner());
        // Drop advice overlapping the range, then record the new one.
        for slot in d.advice.iter_mut() {
            if slot.is_some_and(|a| a.first < end && first < a.end) {
                *slot = None;
            }
        }
        if matches!(advice, Advice::Sequential | Advice::Random) {
            if let Some(slot) = d.advice.iter_mut().find(|s| s.is_none()) {
                *slot = Some(AdviceRange { first, end, advice });
            } else {
                d.advice[0] = Some(AdviceRange { first, end, advice });
            }
        }
    }

    /// A demand fault of thread `tid` at page `page`; returns what to
    /// prefetch. `pages` is used to mark passed pages as used.
    pub(crate) fn on_fault(&self, table: &PageTable, tid: u32, page: usize, write: bool) -> Requests {
        let mut d = self.detector.lock().unwrap_or_else(|p| p.into_inner());
        let out = self.detect(&mut d, table, tid, page, write);
        if !out.as_slice().is_empty() || out.inline.count > 0 {
            self.adapt(&mut d.checkpoint);
        }
        out
    }

    /// `on_fault` with the detector locked.
    fn detect(&self, d: &mut Detector, table: &PageTable, tid: u32, page: usize, write: bool) -> Requests {
        let mut out = Requests::default();
        d.tick += 1;
        let tick = d.tick;
        let advice = d
            .advice
            .iter()
            .flatten()
            .find(|a| page >= a.first && page < a.end)
            .map(|a| a.advice);
        if advice == Some(Advice::Random) {
            return out;
        }
        let cap = self.cap.load(Ordering::Relaxed);
        // Muted: the cap is at its floor and the last windows there still
        // wasted (`adapt`). Streams are followed but issue only one window
        // in PROBE_EVERY, and late threads fill nothing ahead. A mover with
        // no requests sleeps, and its CPU stops taking the TLB shootdowns
        // of the application's own evictions.
        let muted = self.muted.load(Ordering::Relaxed);
        let skip = |pf: &Prefetcher| {
            muted
                && !pf
                    .skipped
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(PROBE_EVERY)
        };
        let (tk, fresh) = thread_slot(&mut d.threads, tid, tick);
        if fresh {
            for j in 0..STREAMS {
                self.restart(tk * STREAMS + j, 0, 1);
            }
        }
        let t = &mut d.threads[tk];
        let p = page as isize;
        // An existing stream?
        for (j, s) in t.streams.iter_mut().enumerate().filter(|(_, s)| s.live) {
            let delta = p - s.pos;
            if delta == 0 || delta % s.stride != 0 || delta.signum() != s.stride.signum() {
                continue;
            }
            let steps = delta / s.stride;
            let frontier = (s.end - s.pos) / s.stride;
            if steps > frontier + 2 * s.depth as isize {
                continue; // too far ahead to be this stream
            }
            s.last_used = tick;
            // The thread passed the pages between its last position and
            // here: those that were prefetched were used.
            let mut used = 0;
            let mut q = s.pos + s.stride;
            while (p - q) * s.stride.signum() > 0 {
                if q >= 0 && (q as usize) < self.pages && table.take_prefetched(q as usize) {
                    used += 1;
                }
                q += s.stride;
            }
            self.used.fetch_add(used, Ordering::Relaxed);
            let at_or_past_trigger = (p - s.trigger) * s.stride.signum() >= 0;
            if p == s.trigger {
                self.triggers.fetch_add(1, Ordering::Relaxed);
            } else if (s.end - p) * s.stride.signum() > 0 {
                self.late.fetch_add(1, Ordering::Relaxed);
            }
            if at_or_past_trigger {
                s.depth = (s.depth * 2).min(cap).max(1);
                let start = if (s.end - p) * s.stride.signum() > 0 {
                    s.end
                } else {
                    p + s.stride
                };
                if skip(self) {
                    s.trigger = start + (s.depth.max(2) / 2) as isize * s.stride;
                    s.end = start + s.depth.max(2) as isize * s.stride;
                } else {
                    self.issue(s, (tk * STREAMS + j) as u32, start, write, &mut out);
                }
            }
            // A late fault: the thread caught up with the movers inside
            // the window (they are behind, typically busy evicting). It
            // fills the pages ahead of it up to the trigger itself, in one
            // run, and the movers skip what it took: the two leapfrog
            // instead of faulting page by page behind each other. The
            // trigger stays missing, so the next window still fires.
            if p != s.trigger && !muted {
                let ahead = (s.trigger - p) / s.stride - 1;
                let n = (ahead.max(0) as usize).min(self.catch_up);
                if n > 0 {
                    let last = p + n as isize * s.stride;
                    let (first, stride) = if s.stride < 0 {
                        (last, -s.stride)
                    } else {
                        (p + s.stride, s.stride)
                    };
                    if first >= 0 && (first as usize) < self.pages {
                        let room = (self.pages - first as usize - 1) / stride as usize + 1;
                        out.inline = Request {
                            first: first as usize,
                            count: n.min(room),
                            stride,
                            write: s.write,
                            ..Default::default()
                        };
                    }
                }
            }
            s.pos = p;
            self.progress[tk * STREAMS + j].pos.store(p, Ordering::Relaxed);
            return out;
        }
        // A new stream from the history?
        // The smallest stride among the progressions that end here: a dense
        // sweep whose faults interleave with another stream's can also
        // show a progression of twice its stride, and a stream of stride
        // 2 over dense data prefetches every other page (one install call
        // each) while the thread faults on the rest.
        let stride = (0..t.hlen)
            .filter_map(|k| {
                let h = t.hist[k];
                let d = p - h;
                (d != 0 && d.abs() <= MAX_STRIDE && t.hist[..t.hlen].contains(&(h - d))).then_some(d)
            })
            .min_by_key(|d| d.abs())
            .map(|d| dense_stride(table, p, d));
        let stride = match (stride, advice) {
            (Some(s), _) => Some(s),
            (None, Some(Advice::Sequential)) => Some(1),
            _ => None,
        };
        if let Some(stride) = stride {
            let victim = t
                .streams
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| if s.live { s.last_used } else { 0 })
                .map(|(k, _)| k)
                .unwrap_or(0);
            let depth = if advice == Some(Advice::Sequential) {
                cap
            } else {
                INITIAL_DEPTH.min(cap)
            };
            let mut s = Stream {
                live: true,
                stride,
                pos: p,
                trigger: p,
                end: p + stride,
                depth,
                write,
                last_used: tick,
            };
            let slot = tk * STREAMS + victim;
            self.restart(slot, p, stride);
            if !skip(self) {
                self.issue(&mut s, slot as u32, p + stride, write, &mut out);
            }
            t.streams[victim] = s;
        }
        t.hist[t.hpos] = p;
        t.hpos = (t.hpos + 1) % HISTORY;
        t.hlen = (t.hlen + 1).min(HISTORY);
        out
    }

    /// Issues a window of `s.depth` pages from `start`, leaving the middle
    /// page as the trigger.
    fn issue(&self, s: &mut Stream, slot: u32, start: isize, write: bool, out: &mut Requests) {
        let generation = self.progress[slot as usize].generation.load(Ordering::Relaxed);
        s.write |= write;
        let depth = s.depth.max(2) as isize;
        let half = depth / 2;
        s.trigger = start + half * s.stride;
        s.end = start + depth * s.stride;
        let mut push = |from: isize, n: isize| {
            // Clip to the region (either direction).
            let (mut from, mut n) = (from, n);
            while n > 0 && (from < 0 || from as usize >= self.pages) {
                from += s.stride;
                n -= 1;
            }
            let mut last = from + (n - 1) * s.stride;
            while n > 0 && (last < 0 || last as usize >= self.pages) {
                last -= s.stride;
                n -= 1;
            }
            if n <= 0 {
                return;
            }
            // Requests run forward in memory for the mover.
            let (first, stride) = if s.stride < 0 {
                (last, -s.stride)
            } else {
                (from, s.stride)
            };
            out.push(Request {
                first: first as usize,
                count: n as usize,
                stride,
                write: s.write,
                stream: slot + 1,
                generation,
            });
            self.issued.fetch_add(n as u64, Ordering::Relaxed);
        };
        push(start, half);
        push(s.trigger + s.stride, depth - half - 1);
    }

    /// Adapts the cap on the window to the waste of recent prefetches;
    /// `c` holds (issued, wasted) as of the last adaptation.
    fn adapt(&self, c: &mut (u64, u64)) {
        let issued = self.issued.load(Ordering::Relaxed);
        let wasted = self.wasted.load(Ordering::Relaxed) + self.spared.load(Ordering::Relaxed);
        let (i0, w0) = *c;
        // A reset of the counters since the checkpoint: start afresh.
        if issued < i0 || wasted < w0 {
            *c = (issued, wasted);
            return;
        }
        if issued - i0 < 4096 {
            return;
        }
        let ratio = (wasted - w0) as f64 / (issued - i0) as f64;
        let cap = self.cap.load(Ordering::Relaxed);
        // Waste at the floor mutes the prefetcher; a probe's good windows
        // end it.
        self.muted.store(ratio > 0.25 && cap <= FLOOR, Ordering::Relaxed);
        let next = if ratio > 0.25 {
            self.shrinks.fetch_add(1, Ordering::Relaxed);
            (cap / 2).max(FLOOR)
        } else if ratio < 0.05 {
            (cap * 2).min(self.max_depth)
        } else {
            cap
        };
        self.cap.store(next, Ordering::Relaxed);
        *c = (issued, wasted);
    }

    /// Zeroes the counters (statistics reset).
    pub(crate) fn reset_counters(&self) {
        for c in [
            &self.issued,
            &self.used,
            &self.wasted,
            &self.dropped,
            &self.triggers,
            &self.late,
            &self.shrinks,
            &self.inline,
            &self.spared,
            &self.stale,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.detector.lock().unwrap_or_else(|p| p.into_inner()).checkpoint = (0, 0);
    }

    /// The current cap on the window.
    pub(crate) fn cap(&self) -> usize {
        self.cap.load(Ordering::Relaxed)
    }

    /// Whether a demand fault of `tid` at `page` belongs to a stream: one
    /// of the thread's live streams would take it, it would start one (its
    /// history or sequential advice), or random advice covers it. Looks,
    /// changes nothing: fault-around leaves such faults to the prefetcher.
    pub(crate) fn claims(&self, tid: u32, page: usize) -> bool {
        // A muted prefetcher takes no fault from fault-around: it would
        // leave the thread to fault page by page.
        if self.muted.load(Ordering::Relaxed) {
            return false;
        }
        let d = self.detector.lock().unwrap_or_else(|p| p.into_inner());
        if d.advice.iter().flatten().any(|a| page >= a.first && page < a.end) {
            return true;
        }
        let Some(t) = d.threads.iter().find(|t| t.tid == tid && t.last_used > 0) else {
            return false;
        };
        let p = page as isize;
        let in_stream = t.streams.iter().filter(|s| s.live).any(|s| {
            let delta = p - s.pos;
            let frontier = (s.end - s.pos) / s.stride;
            delta != 0
                && delta % s.stride == 0
                && delta.signum() == s.stride.signum()
                && delta / s.stride <= frontier + 2 * s.depth as isize
        });
        in_stream
            || (0..t.hlen).any(|k| {
                let h = t.hist[k];
                let d = p - h;
                d != 0 && d.abs() <= MAX_STRIDE && t.hist[..t.hlen].contains(&(h - d))
            })
    }
}

/// The stride of a new stream whose faults show stride `d` ending at `p`:
/// 1 (or -1) when every page between the last two faults is in near memory
/// already. The thread then touches every page and only faults on every
/// `d`-th because something else filled the rest (fault-around installs
/// a cluster with each fault, so a sweep's faults land one cluster apart);
/// a stream of stride `d` would prefetch one page in `d`, one install call
/// each. Pages between real strided accesses are not resident.
fn dense_stride(table: &PageTable, p: isize, d: isize) -> isize {
    if d.abs() <= 1 {
        return d;
    }
    let step = d.signum();
    let mut q = p - d + step;
    while q != p {
        if q < 0
            || !matches!(
                table.load(q as usize).state(),
                PageState::Clean | PageState::Dirty | PageState::Busy
            )
        {
            return d;
        }
        q += step;
    }
    step
}

/// The slot of thread `tid`, and whether it was just (re)assigned to it.
fn thread_slot(threads: &mut [ThreadState; THREADS], tid: u32, tick: u64) -> (usize, bool) {
    let mut fresh = false;
    let k = threads.iter().position(|t| t.tid == tid).unwrap_or_else(|| {
        fresh = true;
        // Least recently used slot.
        let k = threads
            .iter()
            .enumerate()
            .min_by_key(|(_, t)| t.last_used)
            .map(|(k, _)| k)
            .unwrap_or(0);
        threads[k] = ThreadState {
            tid,
            ..Default::default()
        };
        k
    });
    threads[k].last_used = tick;
    (k, fresh)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::PageWord;

    fn pages_of(r: &Requests) -> Vec<usize> {
        let mut v = Vec::new();
        for q in r.as_slice() {
            for k in 0..q.count {
                v.push((q.first as isize + k as isize * q.stride) as usize);
            }
        }
        v.sort_unstable();
        v
    }

    /// Simulates a thread walking `pages` in order, faulting only on pages
    /// not prefetched; returns (demand faults, prefetched pages).
    fn walk(pf: &Prefetcher, table: &PageTable, order: impl Iterator<Item = usize>) -> (usize, usize) {
        let mut fetched = vec![false; pf.pages];
        let (mut faults, mut prefetched) = (0, 0);
        for p in order {
            if fetched[p] {
                continue;
            }
            faults += 1;
            fetched[p] = true;
            for q in pages_of(&pf.on_fault(table, 1, p, false)) {
                if !fetched[q] {
                    fetched[q] = true;
                    table.mark_prefetched(q);
                    prefetched += 1;
                }
            }
        }
        (faults, prefetched)
    }

    #[test]
    fn a_forward_sweep_faults_once_per_half_window() {
        let n = 100_000;
        let pf = Prefetcher::new(n, 512);
        let table = PageTable::new(n);
        let (faults, prefetched) = walk(&pf, &table, 0..n);
        assert_eq!(faults + prefetched, n);
        assert!(faults < n / 200, "{faults} demand faults for {n} pages");
        assert!(pf.used.load(Ordering::Relaxed) as usize > n * 9 / 10);
    }

    #[test]
    fn backward_and_strided_streams() {
        let n = 50_000;
        let pf = Prefetcher::new(n, 256);
        let table = PageTable::new(n);
        let (faults, _) = walk(&pf, &table, (0..n).rev());
        assert!(faults < n / 50, "backward: {faults}");
        let pf = Prefetcher::new(n, 256);
        let table = PageTable::new(n);
        let (faults, _) = walk(&pf, &table, (0..n).step_by(3));
        assert!(faults < n / 3 / 20, "stride 3: {faults}");
    }

    #[test]
    fn requests_go_stale_once_the_thread_has_passed_their_pages() {
        let n = 10_000;
        let pf = Prefetcher::new(n, 64);
        let table = PageTable::new(n);
        let mut reqs = Vec::new();
        for p in 100..103 {
            reqs.extend_from_slice(pf.on_fault(&table, 1, p, false).as_slice());
        }
        let r = *reqs.first().expect("a stream started");
        assert!(r.stream > 0 && r.first > 102);
        assert!(!pf.passed(&r, r.first), "the thread is behind the window");
        // The thread faults past the whole request (the mover fell behind).
        let beyond = r.first + r.count + 5;
        pf.on_fault(&table, 1, beyond, false);
        assert!(pf.passed(&r, r.first) && pf.passed(&r, r.first + r.count - 1));
        assert!(!pf.passed(&r, beyond + 1));
        // Requests from no stream (explicit prefetch) never go stale.
        let explicit = Request { stream: 0, ..r };
        assert!(!pf.passed(&explicit, r.first));
        // A backward stream: pages above the thread are passed.
        let pf = Prefetcher::new(n, 64);
        let mut reqs = Vec::new();
        for p in [5000, 4999, 4998] {
            reqs.extend_from_slice(pf.on_fault(&table, 2, p, false).as_slice());
        }
        let r = *reqs.first().expect("a backward stream started");
        assert!(r.first + r.count <= 4998);
        pf.on_fault(&table, 2, r.first - 3, false);
        assert!(pf.passed(&r, r.first + r.count - 1));
    }

    #[test]
    fn faults_a_cluster_apart_over_resident_pages_start_a_dense_stream() {
        // Fault-around fills 8 pages with each fault: a sweep faults on
        // every 8th page, and the pages between are resident.
        let n = 4096;
        let pf = Prefetcher::new(n, 64);
        let table = PageTable::new(n);
        let resident = |p: usize| {
            let w = table.load(p);
            assert!(table.try_lock(p, w));
            table.unlock(p, PageWord::new(PageState::Clean, false));
        };
        let mut reqs = Vec::new();
        for p in [0, 8, 16] {
            (p..p + 8).for_each(resident);
            reqs.extend_from_slice(pf.on_fault(&table, 1, p, false).as_slice());
        }
        assert!(!reqs.is_empty() && reqs.iter().all(|r| r.stride == 1), "{reqs:?}");
        // Real strided accesses (nothing resident between) keep their stride.
        let pf = Prefetcher::new(n, 64);
        let mut reqs = Vec::new();
        for p in [1000, 1008, 1016] {
            reqs.extend_from_slice(pf.on_fault(&table, 1, p, false).as_slice());
        }
        assert!(!reqs.is_empty() && reqs.iter().all(|r| r.stride == 8), "{reqs:?}");
    }

    #[test]
    fn two_interleaved_streams_of_one_thread() {
        // A stencil row loop: read one grid, write the other, 16 pages at a time.
        let n = 64_000;
        let pf = Prefetcher::new(n, 512);
        let table = PageTable::new(n);
        let order = (0..n / 2 / 16).flat_map(|r| {
            (0..16)
                .map(move |k| r * 16 + k)
                .chain((0..16).map(move |k| n / 2 + r * 16 + k))
        });
        let (faults, _) = walk(&pf, &table, order);
        assert!(faults < n / 100, "{faults}");
    }

    #[test]
    fn random_faults_prefetch_nothing_and_random_advice_silences() {
        let n = 100_000;
        let pf = Prefetcher::new(n, 512);
        let table = PageTable::new(n);
        let mut x = 1u64;
        let order = (0..20_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        });
        let (_, prefetched) = walk(&pf, &table, order);
        assert!(prefetched < 200, "{prefetched}");
        let pf = Prefetcher::new(n, 512);
        pf.set_advice(0, n, Advice::Random);
        let (_, prefetched) = walk(&pf, &table, 0..1000);
        assert_eq!(prefetched, 0);
        pf.set_advice(0, n, Advice::Sequential);
        let r = pf.on_fault(&table, 1, 5000, false);
        assert!(
            pages_of(&r).len() >= 256,
            "sequential advice starts at full depth"
        );
    }

    #[test]
    fn windows_that_keep_wasting_shrink_to_the_floor_and_then_mute() {
        let n = 1 << 20;
        let pf = Prefetcher::new(n, 64);
        let table = PageTable::new(n);
        // A sweep whose every prefetched page is wasted.
        let mut p = 0;
        let mut fault = |pf: &Prefetcher| {
            let r = pf.on_fault(&table, 1, p, false);
            p += 1;
            pf.wasted
                .store(pf.issued.load(Ordering::Relaxed), Ordering::Relaxed);
            !r.as_slice().is_empty() || r.inline.count > 0
        };
        for _ in 0..n / 2 {
            if pf.muted.load(Ordering::Relaxed) {
                break;
            }
            fault(&pf);
        }
        assert!(pf.muted.load(Ordering::Relaxed), "never muted");
        assert_eq!(pf.cap(), FLOOR);
        // Muted: only probes issue.
        let issuing = (0..1600).filter(|_| fault(&pf)).count();
        assert!(issuing <= 1600 / PROBE_EVERY as usize + 1, "{issuing}");
        // Muted, it leaves the thread's next fault to fault-around.
        assert!(!pf.claims(1, p), "a muted prefetcher claimed page {p}");
        // Probes that are used end it.
        let pf = Prefetcher::new(n, 64);
        pf.muted.store(true, Ordering::Relaxed);
        pf.cap.store(FLOOR, Ordering::Relaxed);
        let (faults, _) = walk(&pf, &table, 0..n / 4);
        assert!(
            !pf.muted.load(Ordering::Relaxed) && pf.cap() > FLOOR,
            "{faults} faults, issued {}, used {}, cap {}",
            pf.issued.load(Ordering::Relaxed),
            pf.used.load(Ordering::Relaxed),
            pf.cap()
        );
    }

    #[test]
    fn windows_stay_inside_the_region() {
        let pf = Prefetcher::new(100, 64);
        let table = PageTable::new(100);
        for p in [90, 91, 92, 93, 94] {
            for q in pages_of(&pf.on_fault(&table, 1, p, false)) {
                assert!(q < 100);
            }
        }
        let pf = Prefetcher::new(100, 64);
        for p in [9, 8, 7, 6, 5] {
            for q in pages_of(&pf.on_fault(&table, 1, p, false)) {
                assert!(q < 100);
            }
        }
    }
}
