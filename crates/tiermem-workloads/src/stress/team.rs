//! Team configurations of `tiermem stress`: worker processes (or threads)
//! sharing one team region, every block checked.
//!
//! Rounds of two phases. In the write phase each worker runs random
//! operations on its own share of the blocks (whole-block writes, a word
//! written and restored, copies between blocks, checks), recording each
//! block's tag in the team's shared scratch words (the shadow table, which
//! forked workers share with the host). After a barrier every worker reads
//! random blocks of every share and checks them: pages filled by one
//! member are mapped by others (minor faults, several sharers), and
//! evictions interrupt exactly those. At the end the host checks every
//! block through its own faults.

use super::{mix, word, StressConfig, StressOutcome, ZERO};
use crate::rng::Rng;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tiermem::team::{TeamConfig, TeamKind, TeamPolicy, TeamRegion, Worker, SCRATCH_WORDS};

const WORDS: usize = super::WORDS;
/// Scratch words after the tags: stop flag, then per worker the
/// mismatches it saw and the operations it ran.
const SLOTS: usize = 1 + 2 * MAX_WORKERS;
const MAX_WORKERS: usize = 4;
/// Blocks at most: one tag each in the scratch words.
pub(super) const MAX_BLOCKS: usize = SCRATCH_WORDS - SLOTS;

/// The team part of a drawn configuration.
#[derive(Clone, Debug, Serialize)]
pub struct TeamStress {
    /// "processes" (a page table each) or "threads".
    pub kind: String,
    /// Workers.
    pub workers: usize,
    /// "fifo" or "sharer".
    pub policy: String,
    /// Pages filled per missing fault.
    pub readahead: usize,
    /// Fault-around in the members.
    pub fault_around: bool,
    /// Dirty tracking in the members (write-protected read fills).
    pub dirty_tracking: bool,
}

impl TeamStress {
    /// Draws the team part; `batch` and the budget are drawn by the caller.
    pub(super) fn draw(r: &mut Rng) -> TeamStress {
        TeamStress {
            kind: if r.below(3) == 0 { "threads" } else { "processes" }.into(),
            workers: 2 + r.below(MAX_WORKERS as u64 - 1) as usize,
            policy: if r.below(2) == 0 { "fifo" } else { "sharer" }.into(),
            readahead: [1, 1, 4, 16][r.below(4) as usize],
            fault_around: r.below(4) != 0,
            dirty_tracking: r.below(2) == 0,
        }
    }

    /// The smallest budget the team accepts (pages).
    pub(super) fn min_near_pages(&self, batch: usize) -> u64 {
        ((self.workers + 1) * self.readahead + batch) as u64
    }

    pub(super) fn describe(&self, c: &StressConfig) -> String {
        format!(
            "team {} x{} {} readahead={} around={} dirty={} virt={}K near={}K batch={}",
            self.kind,
            self.workers,
            self.policy,
            self.readahead,
            u8::from(self.fault_around),
            u8::from(self.dirty_tracking),
            c.virt_bytes >> 10,
            c.near_bytes >> 10,
            c.evict_batch
        )
    }

    pub(super) fn config(&self, c: &StressConfig) -> TeamConfig {
        let mut t = TeamConfig::new(c.virt_bytes as usize, c.near_bytes as usize, self.workers);
        t.policy = TeamPolicy::parse(&self.policy).unwrap_or(TeamPolicy::Fifo);
        t.evict_batch_pages = c.evict_batch;
        t.readahead_pages = self.readahead;
        t.fault_around = self.fault_around;
        t.dirty_tracking = self.dirty_tracking;
        t
    }
}

fn fill(block: &[AtomicU64], tag: u64) {
    for (k, w) in block.iter().enumerate() {
        w.store(word(tag, k), Ordering::Relaxed);
    }
}

fn matches(block: &[AtomicU64], tag: u64) -> bool {
    block
        .iter()
        .enumerate()
        .all(|(k, w)| w.load(Ordering::Relaxed) == word(tag, k))
}

/// One worker: rounds of writes to its share and reads of everyone's,
/// until rank 0 sees the deadline. Allocates nothing (a forked worker).
fn work(w: &Worker<'_>, nblocks: usize, seed: u64, deadline: Instant) -> Result<(), tiermem::Error> {
    let words = w.atomics();
    let sc = w.scratch();
    let (tags, slots) = sc.split_at(nblocks);
    let (me, n) = (w.rank(), w.workers());
    let (stop, bad, ops) = (&slots[0], &slots[1 + me], &slots[1 + MAX_WORKERS + me]);
    let share = nblocks * me / n..nblocks * (me + 1) / n;
    let block = |b: usize| &words[b * WORDS..(b + 1) * WORDS];
    let mut r = Rng::new(mix(seed ^ me as u64));
    let round = Duration::from_millis(50);
    loop {
        let until = Instant::now() + round;
        while Instant::now() < until && !share.is_empty() {
            for _ in 0..32 {
                let b = share.start + r.below(share.len() as u64) as usize;
                match r.below(100) {
                    0..=39 => {
                        let tag = r.next_u64() | 1;
                        fill(block(b), tag);
                        tags[b].store(tag, Ordering::Relaxed);
                    }
                    40..=54 => {
                        let x = &block(b)[r.below(WORDS as u64) as usize];
                        let old = x.load(Ordering::Relaxed);
                        x.store(!old, Ordering::Relaxed);
                        x.store(old, Ordering::Relaxed);
                    }
                    55..=69 => {
                        let from = share.start + r.below(share.len() as u64) as usize;
                        if from != b {
                            for (d, s) in block(b).iter().zip(block(from)) {
                                d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
                            }
                            tags[b].store(tags[from].load(Ordering::Relaxed), Ordering::Relaxed);
                        }
                    }
                    _ => {
                        if !matches(block(b), tags[b].load(Ordering::Relaxed)) {
                            bad.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                ops.fetch_add(1, Ordering::Relaxed);
            }
        }
        w.barrier()?;
        // Everyone's blocks, read only: shared pages.
        for _ in 0..64 {
            let b = r.below(nblocks as u64) as usize;
            if !matches(block(b), tags[b].load(Ordering::Relaxed)) {
                bad.fetch_add(1, Ordering::Relaxed);
            }
        }
        if me == 0 && Instant::now() >= deadline {
            stop.store(1, Ordering::Relaxed);
        }
        w.barrier()?;
        if stop.load(Ordering::Relaxed) != 0 {
            return Ok(());
        }
    }
}

/// Runs one team configuration for about `secs` seconds, then checks
/// every block from the host.
pub(super) fn run_one(
    cfg: &StressConfig,
    t: &TeamStress,
    seed: u64,
    secs: f64,
) -> Result<StressOutcome, String> {
    let t0 = Instant::now();
    let what = |e: tiermem::Error| format!("{}: {e}", cfg.describe());
    let nblocks = cfg.virt_bytes as usize / super::BLOCK;
    if nblocks > MAX_BLOCKS {
        return Err(format!(
            "{}: more blocks than the shadow table holds",
            cfg.describe()
        ));
    }
    let team = TeamRegion::new(t.config(cfg)).map_err(what)?;
    let kind = if t.kind == "threads" {
        TeamKind::Threads
    } else {
        TeamKind::Processes
    };
    let deadline = t0 + Duration::from_secs_f64(secs);
    let report = team
        .run(kind, |w| work(w, nblocks, seed, deadline))
        .map_err(what)?;
    let sc = team.scratch();
    let mut first_mismatch = report
        .workers
        .iter()
        .find(|x| !x.status.success())
        .map(|x| format!("worker {} ended: {}", x.rank, x.how));
    let seen: u64 = (0..t.workers)
        .map(|r| sc[nblocks + 1 + r].load(Ordering::Relaxed))
        .sum();
    let ops: u64 = (0..t.workers)
        .map(|r| sc[nblocks + 1 + MAX_WORKERS + r].load(Ordering::Relaxed))
        .sum();
    if seen > 0 {
        first_mismatch.get_or_insert_with(|| format!("the workers saw {seen} blocks with wrong contents"));
    }
    let words = team.atomics();
    let mut corrupted = u64::from(first_mismatch.is_some());
    for b in 0..nblocks {
        let tag = sc[b].load(Ordering::Relaxed);
        if !matches(&words[b * WORDS..(b + 1) * WORDS], tag) {
            corrupted += 1;
            first_mismatch.get_or_insert_with(|| {
                format!("block {b} (byte offset {:#x}) read by the host", b * super::BLOCK)
            });
        }
    }
    let s = team.stats().total();
    if s.errors > 0 {
        first_mismatch.get_or_insert_with(|| format!("{} failed team operations", s.errors));
        corrupted += 1;
    }
    Ok(StressOutcome {
        config: cfg.clone(),
        seed,
        ops,
        syscalls: 0,
        blocks_verified: nblocks as u64,
        corrupted,
        first_mismatch,
        evictions: s.evictions,
        faults: s.faults(),
        injected: Default::default(),
        reported: 0,
        sigbus: 0,
        efault: 0,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Blocks never written read as zeros: the shadow starts at [`ZERO`].
const _: () = assert!(ZERO == 0);
