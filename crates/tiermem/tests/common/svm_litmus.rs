//! SVM litmus bodies shared by the forked-team tests (`tests/svm`) and the
//! MPI tests (`tests/svm_mpi`): each runs in every process of one run and
//! takes the pages in `mode`, this process's mode for the run's kind.

use crate::common::mix;
use std::fmt::Debug;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use tiermem::svm::{SpmFlavour, SvmMode, SvmProc, MAX_LOCKS};
use tiermem::Error;

pub const PAGE: usize = 4096;

/// The mode of every process of a run: SPM in every process (coherent or
/// noncoherent flavour), DSM in every process, or DSM in even ranks and
/// SPM in odd ones (`Mixed`, `MixedNc`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    SpmCoherent,
    SpmNoncoherent,
    Dsm,
    Mixed,
    MixedNc,
}

impl Kind {
    pub fn flavour(self) -> SpmFlavour {
        match self {
            Kind::SpmNoncoherent | Kind::MixedNc => SpmFlavour::Noncoherent,
            _ => SpmFlavour::Coherent,
        }
    }

    /// The mode of rank `rank`'s pages.
    pub fn mode(self, rank: usize) -> SvmMode {
        match self {
            Kind::SpmCoherent | Kind::SpmNoncoherent => SvmMode::Spm,
            Kind::Dsm => SvmMode::Dsm,
            Kind::Mixed | Kind::MixedNc => {
                if rank.is_multiple_of(2) {
                    SvmMode::Dsm
                } else {
                    SvmMode::Spm
                }
            }
        }
    }
}

/// Allocates `pages` pages and puts them in `mode` in this process.
pub fn alloc(p: &SvmProc<'_>, mode: SvmMode, pages: usize) -> Result<usize, Error> {
    let a = p.malloc(pages * PAGE)?;
    p.set_mode(a, pages * PAGE, mode)?;
    Ok(a)
}

/// Fails a worker with a message (the run then names it).
pub fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(what()))
    }
}

/// Fails a worker unless `r` is an error: bad use `what` was accepted.
pub fn refused<T>(r: Result<T, Error>, what: &str) -> Result<(), Error> {
    check(r.is_err(), || format!("{what} accepted"))
}

/// The bad arguments refused in every process of a run, on one node and
/// in an MPI job alike. Returns the page it allocated (collectively; free
/// it the same way).
pub fn refuses_bad_arguments(p: &SvmProc<'_>) -> Result<usize, Error> {
    refused(p.malloc(0), "malloc(0)")?;
    refused(p.malloc(1 << 30), "malloc larger than the heap")?;
    let a = p.malloc(PAGE)?;
    refused(p.lock(MAX_LOCKS), "lock id out of range")?;
    refused(p.unlock(3), "unlock of a lock not held")?;
    p.lock(3)?;
    refused(p.lock(3), "recursive lock")?;
    p.unlock(3)?;
    refused(p.set_mode(a + 1, PAGE, SvmMode::Dsm), "unaligned set_mode")?;
    refused(p.free(a + 8), "free of an inner pointer")?;
    Ok(a)
}

/// Allocates a page in `mode`; after a barrier, rank 1 takes lock `lock`
/// and writes the page, so that it holds a lock the others will want.
pub fn rank_1_takes_lock(p: &SvmProc<'_>, mode: SvmMode, lock: usize) -> Result<(), Error> {
    let a = alloc(p, mode, 1)?;
    p.barrier()?;
    if p.rank() == 1 {
        p.lock(lock)?;
        p.u64s(a, 1)?[0].store(7, Relaxed);
    }
    Ok(())
}

pub fn spin_until(deadline: Instant, what: &str) -> Result<(), Error> {
    check(Instant::now() < deadline, || {
        format!("timed out waiting for {what}")
    })?;
    std::thread::yield_now();
    Ok(())
}

/// Litmus 1, message passing under one lock: `writer` writes data then a
/// flag under lock 0; the others poll the flag under lock 0 (for up to
/// `timeout`). Expected in every mode: a reader that sees the flag sees
/// the data.
pub fn message_passing(
    p: &SvmProc<'_>,
    mode: SvmMode,
    writer: usize,
    timeout: Duration,
) -> Result<(), Error> {
    let data = alloc(p, mode, 1)?;
    let flag = alloc(p, mode, 1)?;
    p.barrier()?;
    if p.rank() == writer {
        p.lock(0)?;
        p.u64s(data + 8, 1)?[0].store(42, Relaxed);
        p.u64s(flag, 1)?[0].store(1, Relaxed);
        p.unlock(0)?;
    } else {
        let deadline = Instant::now() + timeout;
        loop {
            p.lock(0)?;
            let f = p.u64s(flag, 1)?[0].load(Relaxed);
            let d = p.u64s(data + 8, 1)?[0].load(Relaxed);
            p.unlock(0)?;
            if f == 1 {
                check(d == 42, || format!("flag seen, data {d} (want 42)"))?;
                break;
            }
            spin_until(deadline, "the flag")?;
        }
    }
    p.barrier()
}

/// Litmus 2, scope: x written under lock 1, y under lock 2; a process that
/// cached x's page and acquires only lock 2 sees y = 1 and then x: 1 for
/// an SPM reader (release consistency), 0 for a DSM reader (scope
/// consistency allows stale x, and this implementation invalidates only
/// the pages named in lock 2's notices), 0 or 1 where `lenient` (an
/// SPM-coherent writer of y reports conservatively). With 3 or more
/// processes the chain is transitive over ranks 0, 1, 2. Everyone caches
/// x's page, passes a barrier, then `past_barrier` returns once everyone
/// is past its validation, with the deadline of every wait after it.
pub fn scope(
    p: &SvmProc<'_>,
    mode: SvmMode,
    kind: impl Debug,
    lenient: bool,
    past_barrier: impl Fn(&SvmProc<'_>) -> Result<Instant, Error>,
) -> Result<(), Error> {
    let x = alloc(p, mode, 1)?;
    let y = alloc(p, mode, 1)?;
    let (writer_x, writer_y, reader) = if p.procs() == 2 { (0, 0, 1) } else { (0, 1, 2) };
    let xs = p.u64s(x, 1)?;
    let ys = p.u64s(y, 1)?;
    p.barrier()?;
    let _ = std::hint::black_box(xs[0].load(Relaxed)); // everyone caches x's page (DSM)
    p.barrier()?;
    let deadline = past_barrier(p)?;
    if p.rank() == writer_x {
        p.lock(1)?;
        xs[0].store(1, Relaxed);
        p.unlock(1)?;
    }
    if p.rank() == writer_y {
        loop {
            p.lock(1)?;
            let seen = xs[0].load(Relaxed);
            p.unlock(1)?;
            if seen == 1 {
                break;
            }
            spin_until(deadline, "x under lock 1")?;
        }
        p.lock(2)?;
        ys[0].store(1, Relaxed);
        p.unlock(2)?;
    }
    if p.rank() == reader {
        loop {
            p.lock(2)?;
            let yv = ys[0].load(Relaxed);
            let xv = xs[0].load(Relaxed);
            p.unlock(2)?;
            if yv == 1 {
                let allowed: &[u64] = if mode == SvmMode::Spm {
                    &[1]
                } else if lenient {
                    &[0, 1]
                } else {
                    &[0]
                };
                check(allowed.contains(&xv), || {
                    format!("{kind:?}: reader saw y = 1 and x = {xv}, allowed {allowed:?}")
                })?;
                break;
            }
            spin_until(deadline, "y under lock 2")?;
        }
    }
    // Barriers order everything: x = 1 for all now.
    p.barrier()?;
    let xv = xs[0].load(Relaxed);
    check(xv == 1, || format!("after the barrier x = {xv}"))?;
    p.barrier()
}

/// Litmus 3, barriers: every process writes its own words of `pages`
/// shared pages without locks; after a barrier everyone sees every word.
pub fn barriers(p: &SvmProc<'_>, mode: SvmMode, pages: usize) -> Result<(), Error> {
    let a = alloc(p, mode, pages)?;
    let w = p.u64s(a, pages * PAGE / 8)?;
    for round in 0..3u64 {
        for (k, x) in w.iter().enumerate().skip(p.rank()).step_by(p.procs()) {
            x.store(mix(k as u64 ^ round << 20), Relaxed);
        }
        p.barrier()?;
        for (k, x) in w.iter().enumerate() {
            let v = x.load(Relaxed);
            check(v == mix(k as u64 ^ round << 20), || {
                format!("round {round} word {k}: {v:#x}")
            })?;
        }
        p.barrier()?;
    }
    Ok(())
}

/// Litmus 4, false sharing: every process writes disjoint bytes (stride =
/// processes) of one page under its own lock (multiple writers; diffs are
/// byte-exact), so after a barrier every byte is right everywhere.
pub fn false_sharing(p: &SvmProc<'_>, mode: SvmMode) -> Result<(), Error> {
    let a = alloc(p, mode, 1)?;
    let b = p.bytes(a, PAGE)?;
    let (me, n) = (p.rank(), p.procs());
    for round in 0..3usize {
        let val = |k: usize| (mix((k + round * PAGE) as u64) as u8) | 1;
        p.lock(10 + me)?;
        for (k, x) in b.iter().enumerate().skip(me).step_by(n) {
            x.store(val(k), Relaxed);
        }
        p.unlock(10 + me)?;
        p.barrier()?;
        for (k, x) in b.iter().enumerate() {
            let v = x.load(Relaxed);
            check(v == val(k), || {
                format!("round {round} byte {k} = {v}, want {}", val(k))
            })?;
        }
        p.barrier()?;
    }
    Ok(())
}

/// Litmus 5, byte-granular writes at page edges: each process writes the
/// bytes just before and just after a page boundary (and the heap block's
/// first and last bytes), one byte apart from its neighbours (the diff of
/// one process must not carry its neighbours' old bytes).
pub fn adjacent_bytes(p: &SvmProc<'_>, mode: SvmMode) -> Result<(), Error> {
    let a = alloc(p, mode, 3)?;
    let b = p.bytes(a, 3 * PAGE)?;
    let me = p.rank();
    let spots = |r: usize| {
        [
            PAGE - 1 - r,
            PAGE + r,
            2 * PAGE - 1 - r,
            2 * PAGE + r,
            r,
            3 * PAGE - 1 - r,
        ]
    };
    for &k in &spots(me) {
        b[k].store(0xa0 + me as u8, Relaxed);
    }
    p.barrier()?;
    for r in 0..p.procs() {
        for &k in &spots(r) {
            let v = b[k].load(Relaxed);
            check(v == 0xa0 + r as u8, || {
                format!("byte {k} = {v:#x}, want rank {r}'s")
            })?;
        }
    }
    // Neighbours nobody wrote stay zero.
    let n = p.procs();
    for k in [PAGE - 1 - n, PAGE + n, 3 * PAGE / 2] {
        check(b[k].load(Relaxed) == 0, || format!("byte {k} changed"))?;
    }
    p.barrier()
}

/// Mode switches between barriers: every round each process puts each
/// page in a mode of its own choosing (some pages dirty in DSM when
/// switched), writes its words, and after the barrier everyone checks
/// everything. The pages start in `mode`.
pub fn mode_switches(p: &SvmProc<'_>, mode: SvmMode) -> Result<(), Error> {
    let pages = 4;
    let a = alloc(p, mode, pages)?;
    let w = p.u64s(a, pages * PAGE / 8)?;
    let (me, n) = (p.rank(), p.procs());
    let pick = |round: usize, pg: usize| {
        if mix((round * 131 + pg * 7 + me) as u64).is_multiple_of(2) {
            SvmMode::Dsm
        } else {
            SvmMode::Spm
        }
    };
    for round in 0..4usize {
        for pg in 0..pages {
            p.set_mode(a + pg * PAGE, PAGE, pick(round, pg))?;
        }
        for (k, x) in w.iter().enumerate().skip(me).step_by(n) {
            x.store(mix((k + round * 100_000) as u64), Relaxed);
        }
        // Switch again while dirty: the diff must survive.
        for pg in 0..pages {
            p.set_mode(a + pg * PAGE, PAGE, pick(round + 1, pg))?;
        }
        p.barrier()?;
        for (k, x) in w.iter().enumerate() {
            let v = x.load(Relaxed);
            check(v == mix((k + round * 100_000) as u64), || {
                format!("round {round} word {k}")
            })?;
        }
        p.barrier()?;
    }
    Ok(())
}
