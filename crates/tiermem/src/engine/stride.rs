//! Stride detection, an extension of fault-around: a thread whose demand
//! faults fall at a regular stride `d` beyond fault-around's window (FT's
//! z-direction FFT reads one page every 1 MiB) gets the next pages of the
//! stride, `p + d, p + 2d, ...`, each with its aligned window of
//! neighbours (the next columns), installed with its fault, in its own
//! context, as fault-around installs neighbours.
//!
//! A stream is born when a fault at `p` finds `p - d`, `p - 2d` and
//! `p - 3d` among the thread's last fault-around history entries (three
//! earlier points: random faults practically never line up so), or only
//! `p - d` where the thread has a stream of stride `d` already (the next
//! column of the same array: it starts as far ahead as the last one
//! ran). Three earlier points start no stream where another recent fault
//! of the thread lies within fault-around's reach of `p` or between the
//! points (sequential walks show chance lattices; a column walk's faults
//! stand alone). Each slot keeps [`STREAMS`] streams (a loop may read one array
//! along a stride and write another). A later fault on a stream's
//! lattice, past its last fault and at most one stride past the points
//! installed ahead, continues it: the points in between count as used, and
//! the number installed ahead doubles, up to the cap. Each point's window
//! is as wide as the cap, at most 16 pages, and none on a stream's first
//! fault (chance alignments rarely continue) unless it is a new column of
//! a known stride, nor while more than an eighth of the points go unused
//! (a window is 16 times a point's traffic: zstd -T2 at 40% of its
//! footprint had 44% of its points unused and its windows installed 5.5 M
//! pages into the slots its hash tables needed, 5x the demand faults and
//! 5x the time of stride detection off; FT.A's points go 6% unused). Pages ahead are taken only when untouched (or far, from
//! a store that needs no staging), reachable and lockable at once: a busy
//! or resident page is skipped, nothing waits. They take free near slots
//! only, never the last three, and never evict.
//!
//! Accounting, as for fault-around: a bit per point installed ahead; used
//! when the stream's next fault passes it or a write reaches it, evicted
//! unused when found out of near memory. The cap halves while more than
//! a quarter of them go unused (see [`WasteCap`]): at 41%, zstd's cap
//! stayed at 2 under a half, and its points alone doubled its faults.

use super::locality::{adapted_cap, MarkBits, WasteLook, HISTORY, MAX_CLUSTER, SLOTS};
use super::RegionCore;
use crate::page::{PageState, PageTable, PageWord};
use crate::stats::{FaultTimer, StrideStats};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Most pages installed ahead per fault.
pub(crate) const MAX_AHEAD: usize = 32;
/// Pages installed ahead by a new stream's first fault.
const FIRST_AHEAD: usize = 4;
/// Streams per thread slot.
const STREAMS: usize = 4;
/// Pages installed ahead between two looks at the waste.
const ADAPT_EVERY: u64 = 4096;

/// One stream: the page of its last fault (+ 1; 0: empty), its stride in
/// pages and how many pages its last fault asked for ahead.
#[derive(Default)]
struct Stream {
    last: AtomicUsize,
    stride: AtomicIsize,
    ahead: AtomicUsize,
}

#[repr(align(64))]
#[derive(Default)]
struct Slot {
    streams: [Stream; STREAMS],
    next: AtomicU32,
}

/// What a fault asks for: `count` pages `from + k * stride`, `k >= 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) from: usize,
    pub(super) stride: isize,
    pub(super) count: usize,
}

/// A cap halved while more than a quarter of the pages installed under it
/// go unused, doubled back while under an eighth do.
struct WasteCap {
    cap: AtomicUsize,
    /// Whether under an eighth of the pages installed in the last look
    /// went unused (true until the first look).
    precise: AtomicBool,
    look: WasteLook,
    shrinks: AtomicU64,
}

impl WasteCap {
    fn new(cap: usize) -> WasteCap {
        WasteCap {
            cap: AtomicUsize::new(cap),
            precise: AtomicBool::new(true),
            look: WasteLook::default(),
            shrinks: AtomicU64::new(0),
        }
    }

    fn adapt(&self, installed: u64, unused: u64, min: usize, max: usize) {
        let Some(look) = self.look.look(installed, ADAPT_EVERY, || unused) else {
            return;
        };
        let cap = self.cap.load(Ordering::Relaxed);
        let (installed, wasted) = look;
        self.precise.store(8 * wasted < installed, Ordering::Relaxed);
        let next = adapted_cap(cap, look, 4, (min, max), &self.shrinks);
        self.cap.store(next, Ordering::Relaxed);
    }
}

/// Stride state of one region.
pub(crate) struct Stride {
    slots: [Slot; SLOTS],
    /// A stride smaller than this (pages) is fault-around's.
    min_stride: usize,
    /// One bit per page: installed ahead, not known used yet.
    marks: MarkBits,
    streams: AtomicU64,
    installs: AtomicU64,
    installed: AtomicU64,
    neighbours: AtomicU64,
    used: AtomicU64,
    evicted_unused: AtomicU64,
    cap: WasteCap,
}

impl Stride {
    pub(super) fn new(pages: usize, min_stride: usize) -> Result<Stride, tiermem_sys::mm::MmError> {
        Ok(Stride {
            slots: std::array::from_fn(|_| Slot::default()),
            min_stride,
            marks: MarkBits::new(pages)?,
            streams: AtomicU64::new(0),
            installs: AtomicU64::new(0),
            installed: AtomicU64::new(0),
            neighbours: AtomicU64::new(0),
            used: AtomicU64::new(0),
            evicted_unused: AtomicU64::new(0),
            cap: WasteCap::new(MAX_AHEAD),
        })
    }

    fn cap(&self) -> usize {
        self.cap.cap.load(Ordering::Relaxed)
    }

    /// Whether the points installed ahead are nearly all used: only then
    /// do they bring their windows.
    fn precise(&self) -> bool {
        self.cap.precise.load(Ordering::Relaxed)
    }

    /// A demand fault of `tid` at `page`, whose recent faults (pages + 1,
    /// 0: empty; `page` itself may be among them) are `hist`: the pages to
    /// install ahead, if the fault continues or starts a stream.
    pub(super) fn on_fault(&self, tid: u32, page: usize, hist: &[usize; HISTORY]) -> Option<Plan> {
        let s = &self.slots[tid as usize % SLOTS];
        let cap = self.cap();
        let p = page as isize;
        for st in &s.streams {
            let last = st.last.load(Ordering::Relaxed);
            if last == 0 {
                continue;
            }
            let last = (last - 1) as isize;
            let d = st.stride.load(Ordering::Relaxed);
            let ahead = st.ahead.load(Ordering::Relaxed) as isize;
            let diff = p - last;
            if d == 0 || diff % d != 0 || diff / d < 1 || diff / d > ahead + 1 {
                continue;
            }
            // The thread passed the pages between: used.
            for k in 1..diff / d {
                self.take_used((last + k * d) as usize);
            }
            let next = (2 * ahead as usize).clamp(1, cap.max(1));
            st.last.store(page + 1, Ordering::Relaxed);
            st.ahead.store(next, Ordering::Relaxed);
            return Some(Plan {
                from: page,
                stride: d,
                count: next,
            });
        }
        let seen = |q: isize| q >= 0 && hist.iter().any(|&h| h == q as usize + 1);
        // A fault next to another recent fault of the thread is part of a
        // local walk, fault-around's business: it starts no new lattice
        // (a new column of a known stride still continues it). Sequential
        // streams side by side show chance lattices: a stencil's rows,
        // their clusters cut short by a second thread, started streams of
        // stride 48 and 61 pages that installed 112 K pages ahead, and
        // its fault-around clusters then went 25% unused.
        let local = hist
            .iter()
            .any(|&h| h != 0 && h != page + 1 && (h - 1).abs_diff(page) <= self.min_stride);
        // Nor a lattice whose points have other faults between them: a
        // sequential walk whose last step was long (pages ahead were
        // present) shows strides of every multiple of its step (a sweep
        // with 16-page clusters started 566 streams of stride 48).
        let dense = |d: isize| {
            let (lo, hi) = if d > 0 { (p - 3 * d, p) } else { (p, p - 3 * d) };
            hist.iter().any(|&h| {
                let q = h as isize - 1;
                h != 0 && q > lo && q < hi && (p - q) % d != 0
            })
        };
        // A stream of the thread with this stride (it walked the previous
        // column of the same array): one earlier fault is enough.
        let known = |d: isize| {
            s.streams
                .iter()
                .position(|st| st.stride.load(Ordering::Relaxed) == d)
        };
        // The shortest stride the history shows (a walk at stride d also
        // holds strides 2d, 3d...); one within fault-around's window is
        // its business.
        let d = hist
            .iter()
            .filter(|&&h| h != 0 && h != page + 1)
            .map(|&h| p - (h - 1) as isize)
            .filter(|&d| !local && seen(p - 2 * d) && seen(p - 3 * d) && !dense(d) || known(d).is_some())
            .min_by_key(|d| d.unsigned_abs());
        if let Some(d) = d.filter(|d| d.unsigned_abs() > self.min_stride) {
            // A new column takes the place of the old one, and starts as
            // far ahead as it ran.
            let (at, count) = match known(d) {
                Some(i) => (i, s.streams[i].ahead.load(Ordering::Relaxed)),
                None => {
                    let k = s.next.load(Ordering::Relaxed);
                    s.next.store(k.wrapping_add(1), Ordering::Relaxed);
                    (k as usize % STREAMS, FIRST_AHEAD)
                }
            };
            let st = &s.streams[at];
            let count = count.min(cap).max(1);
            st.last.store(page + 1, Ordering::Relaxed);
            st.stride.store(d, Ordering::Relaxed);
            st.ahead.store(count, Ordering::Relaxed);
            self.streams.fetch_add(1, Ordering::Relaxed);
            return Some(Plan {
                from: page,
                stride: d,
                count,
            });
        }
        None
    }

    /// Every [`ADAPT_EVERY`] pages installed ahead: adapts the cap to the
    /// waste (down to one page ahead, so that the waste is still measured).
    pub(super) fn adapt(&self) {
        self.cap.adapt(
            self.installed.load(Ordering::Relaxed),
            self.evicted_unused.load(Ordering::Relaxed),
            1,
            MAX_AHEAD,
        );
    }

    /// Counts the points of the stride (`n`) and the neighbours with them
    /// (`extra`) one fault installed.
    pub(super) fn count(&self, n: usize, extra: usize) {
        if n + extra > 0 {
            self.installs.fetch_add(1, Ordering::Relaxed);
            self.installed.fetch_add(n as u64, Ordering::Relaxed);
            self.neighbours.fetch_add(extra as u64, Ordering::Relaxed);
        }
    }

    pub(super) fn mark(&self, p: usize) {
        self.marks.mark(p);
    }

    fn take_used(&self, p: usize) {
        if self.marks.take(p) {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A page about to be filled again: still marked, it left unused.
    pub(super) fn refilled(&self, p: usize) {
        if self.marks.take(p) {
            self.evicted_unused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Page `p` was written: used.
    pub(super) fn written(&self, p: usize) {
        self.take_used(p);
    }

    /// The counters; marked pages no longer in near memory are counted as
    /// evicted unused first.
    pub(super) fn stats(&self, table: &PageTable) -> StrideStats {
        self.marks
            .gone(|p| super::around::out_of_near(table, p), |p| self.refilled(p));
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StrideStats {
            streams: ld(&self.streams),
            installs: ld(&self.installs),
            installed: ld(&self.installed),
            neighbours: ld(&self.neighbours),
            used: ld(&self.used),
            evicted_unused: ld(&self.evicted_unused),
            ahead_cap: self.cap() as u64,
            shrinks: ld(&self.cap.shrinks),
        }
    }

    /// Zeroes the counters (statistics reset); marks stay.
    pub(super) fn reset_counters(&self) {
        for c in [
            &self.streams,
            &self.installs,
            &self.installed,
            &self.neighbours,
            &self.used,
            &self.evicted_unused,
            &self.cap.shrinks,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

impl RegionCore {
    /// After a demand fill of `page` by `tid`: installs the next pages of
    /// the thread's stride, if its faults show one (see the module docs),
    /// each with the aligned window of its neighbours. Nothing where
    /// fault-around or stride detection is off (THP and hugetlb regions
    /// have no fault-around), or where a prefetch stream takes the fault.
    pub(super) fn stride_ahead(&self, tid: u32, page: usize, write: bool) {
        let Some(fa) = &self.around else { return };
        let Some(st) = fa.stride() else { return };
        let hist = fa.history(tid);
        let Some(plan) = st.on_fault(tid, page, &hist) else {
            return;
        };
        if self.prefetcher.as_ref().is_some_and(|pf| pf.claims(tid, page)) {
            return;
        }
        st.adapt();
        // Each point of the stride comes with its aligned window: the next
        // columns of a column walk, installed (and later evicted) as runs,
        // not as scattered pages (one unmap call each). Narrower as the
        // cap shrinks under waste; none for a stream's first fault, unless
        // it follows an earlier column (most streams that never continue
        // are chance alignments: CG.A and IS.A at near 50% paid 2-9% more
        // bytes in for their windows).
        let width = if plan.count > FIRST_AHEAD && st.precise() {
            st.cap().clamp(1, MAX_CLUSTER)
        } else {
            1
        };
        let far_ok = self.staging.is_none();
        let mut timer = FaultTimer::start();
        let mut run = [(0, PageWord::new(PageState::Untouched, false)); MAX_CLUSTER];
        let mut ok = [false; MAX_CLUSTER];
        let (mut points, mut extra) = (0, 0);
        'points: for k in 1..=plan.count as isize {
            let q = plan.from as isize + k * plan.stride;
            if q < 0 || q as usize >= self.pages.len() {
                break;
            }
            let q = q as usize;
            let lo = q & !(width - 1);
            let hi = (lo + width).min(self.pages.len());
            let mut p = lo;
            while p < hi {
                // The next run of pages that are untouched (or far, from a
                // store that needs no staging), reachable and lock at once:
                // resident and busy pages are skipped, nothing waits.
                let mut n = 0;
                while p < hi {
                    let w = self.pages.load(p);
                    let fits = match w.state() {
                        PageState::Untouched => true,
                        PageState::Far => far_ok,
                        _ => false,
                    };
                    p += 1;
                    if fits && self.access.reachable(p - 1) && self.pages.try_lock(p - 1, w) {
                        run[n] = (p - 1, w);
                        n += 1;
                    } else if n > 0 {
                        break;
                    }
                }
                if n == 0 {
                    continue;
                }
                // Free slots only, never the last three (see
                // `claim_around`): pages ahead never evict.
                let room = self
                    .free_slots()
                    .saturating_sub(crate::config::MIN_NEAR_PAGES - 1);
                let got = if room == 0 {
                    0
                } else {
                    self.take_slots(n.min(room))
                };
                for &(p, w) in &run[got..n] {
                    self.pages.unlock(p, w);
                }
                if got == 0 {
                    break 'points;
                }
                for &(p, _) in &run[..got] {
                    fa.refilled(p);
                }
                self.install_run(&run[..got], &mut ok, write, false, None, &mut timer);
                for (&(p, _), _) in run[..got].iter().zip(&ok).filter(|(_, &ok)| ok) {
                    if p == q {
                        st.mark(p);
                        points += 1;
                    } else {
                        extra += 1;
                    }
                }
            }
        }
        st.count(points, extra);
        self.stats.charge(timer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEAR: usize = 32;

    /// A thread's history as fault-around keeps it: the last `HISTORY`
    /// faults, round robin.
    struct Thread {
        hist: [usize; HISTORY],
        next: usize,
    }

    impl Thread {
        fn new() -> Thread {
            Thread {
                hist: [0; HISTORY],
                next: 0,
            }
        }
        fn fault(&mut self, st: &Stride, tid: u32, p: usize) -> Option<Plan> {
            self.hist[self.next % HISTORY] = p + 1;
            self.next += 1;
            st.on_fault(tid, p, &self.hist)
        }
    }

    /// Walks `walk` as a thread that faults only on pages not installed
    /// ahead; returns (faults, pages installed ahead).
    fn run(st: &Stride, walk: impl Iterator<Item = usize>) -> (usize, usize) {
        let mut t = Thread::new();
        let mut present = std::collections::HashSet::new();
        let (mut faults, mut ahead) = (0, 0);
        for p in walk {
            if present.contains(&p) {
                continue;
            }
            faults += 1;
            present.insert(p);
            if let Some(plan) = t.fault(st, 1, p) {
                for k in 1..=plan.count as isize {
                    let q = plan.from as isize + k * plan.stride;
                    if q >= 0 && present.insert(q as usize) {
                        ahead += 1;
                    }
                }
            }
        }
        (faults, ahead)
    }

    #[test]
    fn a_forward_stride_is_found_after_four_faults_and_grows() {
        let st = Stride::new(1 << 20, NEAR).unwrap();
        let mut t = Thread::new();
        let d = 256;
        for k in 0..3 {
            assert_eq!(t.fault(&st, 1, 1000 + k * d), None);
        }
        let plan = t.fault(&st, 1, 1000 + 3 * d).expect("a stream");
        assert_eq!(
            plan,
            Plan {
                from: 1000 + 3 * d,
                stride: d as isize,
                count: FIRST_AHEAD
            }
        );
        // The next fault past the pages installed: continued, doubled.
        let p = 1000 + (3 + FIRST_AHEAD + 1) * d;
        let plan = t.fault(&st, 1, p).expect("continued");
        assert_eq!(plan.count, 2 * FIRST_AHEAD);
        assert_eq!(st.streams.load(Ordering::Relaxed), 1);
        // A whole column of 1024 strided pages: few faults.
        let st = Stride::new(1 << 20, NEAR).unwrap();
        let (faults, ahead) = run(&st, (0..1024).map(|k| 7 + k * d));
        assert!(faults < 50, "{faults} faults");
        assert!(ahead > 1000 - 50 && ahead <= 1024 + MAX_AHEAD, "{ahead} ahead");
    }

    #[test]
    fn a_backward_stride_is_found_too() {
        let st = Stride::new(1 << 20, NEAR).unwrap();
        let d = 300;
        let top = 600 * d;
        let (faults, _) = run(&st, (0..500).map(|k| top - k * d));
        assert!(faults < 40, "{faults} faults");
        let mut t = Thread::new();
        let st = Stride::new(1 << 20, NEAR).unwrap();
        for k in 0..3 {
            t.fault(&st, 1, top - k * d);
        }
        let plan = t.fault(&st, 1, top - 3 * d).unwrap();
        assert_eq!(plan.stride, -(d as isize));
    }

    #[test]
    fn interleaved_streams_of_one_thread_are_each_followed() {
        // Reads along one array, writes along another, faults alternating.
        let st = Stride::new(1 << 22, NEAR).unwrap();
        let (a, b, d) = (100, 3_000_000, 256);
        let walk = (0..2000).flat_map(|k| [a + k * d, b + k * (d + 64)]);
        let (faults, ahead) = run(&st, walk);
        assert!(faults < 250, "{faults} faults for 4000 pages");
        assert!(ahead > 3700, "{ahead}");
        assert!(st.streams.load(Ordering::Relaxed) <= 4);
    }

    #[test]
    fn near_strides_are_left_to_fault_around() {
        let st = Stride::new(1 << 20, NEAR).unwrap();
        let (faults, ahead) = run(&st, (0..1000).map(|k| k * NEAR));
        assert_eq!((faults, ahead), (1000, 0));
        let (_, ahead) = run(&st, 0..1000);
        assert_eq!(ahead, 0);
    }

    #[test]
    fn sequential_streams_side_by_side_start_no_stream() {
        // A lattice of stride 61 among the history, with a fault 10 pages
        // from this one (another stream of a stencil's rows): no stream.
        let st = Stride::new(1 << 20, NEAR).unwrap();
        let mut t = Thread::new();
        let p = 100_000;
        for q in [p - 183, p - 122, p - 10, p - 61] {
            assert_eq!(t.fault(&st, 1, q), None);
        }
        assert_eq!(t.fault(&st, 1, p), None);
        // A sequential walk in steps of 16 whose last step was 48: every
        // multiple of 16 is a lattice, with faults between the points.
        let mut t = Thread::new();
        for q in (p - 256..=p - 48).step_by(16) {
            assert_eq!(t.fault(&st, 1, q), None);
        }
        assert_eq!(t.fault(&st, 1, p), None);
        // The same lattice alone: a stream.
        let mut t = Thread::new();
        for q in [p - 183, p - 122, p - 61] {
            t.fault(&st, 1, q);
        }
        assert_eq!(t.fault(&st, 1, p).map(|plan| plan.stride), Some(61));
    }

    #[test]
    fn random_faults_never_start_a_stream() {
        let st = Stride::new(1 << 16, NEAR).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let walk = (0..200_000).map(move |_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (1 << 16)) as usize
        });
        let mut t = Thread::new();
        let plans = walk.filter_map(|p| t.fault(&st, 1, p)).count();
        assert!(plans < 20, "{plans} plans over 200000 random faults");
    }

    #[test]
    fn plans_start_at_page_zero_and_may_run_past_the_end() {
        // The detector proposes; the installer stops at the region's ends.
        let st = Stride::new(1 << 12, NEAR).unwrap();
        let mut t = Thread::new();
        let d = 100;
        for k in 0..3 {
            t.fault(&st, 1, 3 * d - k * d);
        }
        let plan = t.fault(&st, 1, 0).unwrap();
        assert_eq!((plan.from, plan.stride), (0, -(d as isize)));
        // Marks at the last page of the region and beyond are safe.
        st.mark((1 << 12) - 1);
        st.take_used((1 << 12) - 1);
        st.take_used(1 << 30);
        assert_eq!(st.used.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_third_unused_shrinks_the_cap_and_drops_the_windows() {
        let st = Stride::new(1 << 16, NEAR).unwrap();
        assert!(st.precise(), "windows until the first look");
        // A third of the points unused (zstd -T2's hash tables: 41%).
        for _ in 0..10 {
            st.installed.fetch_add(3 * ADAPT_EVERY, Ordering::Relaxed);
            st.evicted_unused.fetch_add(ADAPT_EVERY, Ordering::Relaxed);
            st.adapt();
            assert!(!st.precise());
        }
        assert_eq!(st.cap(), 1);
        // A twentieth unused (FT.A's column walks: 6%): windows again.
        st.installed.fetch_add(20 * ADAPT_EVERY, Ordering::Relaxed);
        st.evicted_unused.fetch_add(ADAPT_EVERY, Ordering::Relaxed);
        st.adapt();
        assert!(st.precise());
        assert_eq!(st.cap(), 2);
    }

    #[test]
    fn the_cap_shrinks_under_waste_and_grows_back() {
        let st = Stride::new(1 << 16, NEAR).unwrap();
        st.installed.fetch_add(ADAPT_EVERY, Ordering::Relaxed);
        st.evicted_unused.fetch_add(ADAPT_EVERY, Ordering::Relaxed);
        st.adapt();
        assert_eq!(st.cap(), MAX_AHEAD / 2);
        for _ in 0..10 {
            st.installed.fetch_add(ADAPT_EVERY, Ordering::Relaxed);
            st.evicted_unused.fetch_add(ADAPT_EVERY, Ordering::Relaxed);
            st.adapt();
        }
        assert_eq!(st.cap(), 1);
        for _ in 0..10 {
            st.installed.fetch_add(ADAPT_EVERY, Ordering::Relaxed);
            st.adapt();
        }
        assert_eq!(st.cap(), MAX_AHEAD);
    }
}
