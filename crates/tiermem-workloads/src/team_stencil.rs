//! The stencil on a team region (partially separated page tables, paper 1
//! III.C): `regular` runs the workers as threads of one process (one page
//! table: every eviction interrupts the other CPUs running the process),
//! `pspt` as processes (a page table each: an eviction interrupts only the
//! workers that map the page). Both use the same fault and eviction code,
//! so the difference is the page tables. Rows are split as in the threaded
//! stencil and every point is computed the same way, so the checksums
//! match the other modes bit for bit.

use crate::stencil::{checksum, init_value, row_kernel, StencilOutcome, StencilParams, TeamDetail};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tiermem::team::{TeamConfig, TeamKind, TeamPolicy, TeamRegion, Worker};

/// A team mode.
#[derive(Clone, Debug)]
pub struct TeamMode {
    /// Name in results (`regular`, `pspt`, `pspt+prefetch`, ...).
    pub name: String,
    /// Threads (regular) or processes (pspt).
    pub kind: TeamKind,
    /// Pages filled per missing fault (the `+prefetch` modes).
    pub readahead: usize,
    /// Replacement policy.
    pub policy: TeamPolicy,
    /// The budget holds everything (`team-none`: no data movement).
    pub full_budget: bool,
    /// Fault-around in the members (off with `+noaround`).
    pub fault_around: bool,
    /// Dirty tracking in the members (on with `+dirty`; off, every victim
    /// is written back).
    pub dirty_tracking: bool,
}

impl TeamMode {
    /// Parses `regular`, `pspt`, `team-none`, with `+prefetch`, `+sharer`,
    /// `+noaround` and `+dirty` suffixes (read-ahead of `readahead` pages;
    /// sharer-aware replacement; one page per fault, as before the members
    /// had the engine's fault-around; dirty tracking).
    pub fn parse(s: &str, readahead: usize) -> Option<TeamMode> {
        let mut parts = s.split('+');
        let (kind, full_budget) = match parts.next()? {
            "regular" => (TeamKind::Threads, false),
            "pspt" => (TeamKind::Processes, false),
            "team-none" => (TeamKind::Processes, true),
            _ => return None,
        };
        let mut m = TeamMode {
            name: s.to_owned(),
            kind,
            readahead: 1,
            policy: TeamPolicy::Fifo,
            full_budget,
            fault_around: true,
            dirty_tracking: false,
        };
        for p in parts {
            match p {
                "prefetch" => m.readahead = readahead.max(2),
                "sharer" => m.policy = TeamPolicy::SharerAware,
                "noaround" => m.fault_around = false,
                "dirty" => m.dirty_tracking = true,
                _ => return None,
            }
        }
        Some(m)
    }
}

// Scratch words (written by rank 0).
const S_INIT_NS: usize = 0;
const S_ITERS_NS: usize = 1;
const S_TLB0: usize = 2;
const S_TLB1: usize = 3;
const S_ITER: usize = 16;

fn rows(first: usize, last: usize, rank: usize, workers: usize) -> std::ops::Range<usize> {
    let n = last - first;
    first + n * rank / workers..first + n * (rank + 1) / workers
}

fn load_row(g: &[AtomicU64], at: usize, out: &mut [f64]) {
    for (k, x) in out.iter_mut().enumerate() {
        *x = f64::from_bits(g[at + k].load(Ordering::Relaxed));
    }
}

/// One worker's part: initialise its rows, then the timed sweeps between
/// barriers; rank 0 takes the statistics marks and the timings.
fn work(w: &Worker<'_>, n: usize, iters: usize) -> Result<(), tiermem::Error> {
    let g = w.atomics();
    let s = w.scratch();
    let (r, nw) = (w.rank(), w.workers());
    let t0 = Instant::now();
    for grid in 0..2 {
        for i in rows(0, n, r, nw) {
            for j in 0..n {
                g[grid * n * n + i * n + j].store(init_value(i, j).to_bits(), Ordering::Relaxed);
            }
        }
    }
    w.barrier()?;
    if r == 0 {
        s[S_INIT_NS].store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        w.mark(0);
        s[S_TLB0].store(tiermem_sys::interrupts::tlb_shootdowns(), Ordering::Relaxed);
    }
    w.barrier()?;
    let t = Instant::now();
    let (mut up, mut mid, mut dn, mut out) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for it in 0..iters {
        let ti = Instant::now();
        let (src, dst) = if it % 2 == 0 { (0, n * n) } else { (n * n, 0) };
        for i in rows(1, n - 1, r, nw) {
            load_row(g, src + (i - 1) * n, &mut up);
            load_row(g, src + i * n, &mut mid);
            load_row(g, src + (i + 1) * n, &mut dn);
            load_row(g, dst + i * n, &mut out);
            row_kernel(&up, &mid, &dn, &mut out);
            for (j, x) in out.iter().enumerate().take(n - 1).skip(1) {
                g[dst + i * n + j].store(x.to_bits(), Ordering::Relaxed);
            }
        }
        w.barrier()?;
        if r == 0 && S_ITER + it < s.len() {
            s[S_ITER + it].store(ti.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
    if r == 0 {
        s[S_ITERS_NS].store(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        w.mark(1);
        s[S_TLB1].store(tiermem_sys::interrupts::tlb_shootdowns(), Ordering::Relaxed);
    }
    Ok(())
}

/// Runs the stencil in a team mode.
pub fn run(
    mode: &TeamMode,
    virt: u64,
    near: u64,
    evict_batch: usize,
    p: &StencilParams,
    progress: &mut dyn FnMut(&str),
) -> Result<StencilOutcome, String> {
    let n = p.n;
    let bytes = (2 * n * n * 8).div_ceil(4096) * 4096;
    let virt = (virt as usize).max(bytes);
    let mut cfg = TeamConfig::new(
        virt,
        if mode.full_budget { virt } else { near as usize },
        p.threads,
    );
    cfg.cpus = p.cpus.clone();
    cfg.policy = mode.policy;
    cfg.evict_batch_pages = evict_batch;
    cfg.readahead_pages = mode.readahead;
    cfg.fault_around = mode.fault_around;
    cfg.dirty_tracking = mode.dirty_tracking;
    let mut team = TeamRegion::new(cfg).map_err(|e| e.to_string())?;
    progress(&format!(
        "[{}] {} workers as {}, near {} MiB, batch {evict_batch}, read-ahead {}",
        mode.name,
        p.threads,
        if mode.kind == TeamKind::Processes {
            "processes"
        } else {
            "threads"
        },
        if mode.full_budget {
            virt >> 20
        } else {
            near as usize >> 20
        },
        mode.readahead
    ));
    let iters = p.iters;
    team.run(mode.kind, |w| work(w, n, iters))
        .map_err(|e| e.to_string())?;
    let scratch: Vec<u64> = team.scratch().iter().map(|x| x.load(Ordering::Relaxed)).collect();
    let sc = |k: usize| scratch[k];
    let (a, b) = (team.stats_at_mark(0), team.stats_at_mark(1));
    let per: Vec<_> = b
        .members
        .iter()
        .zip(&a.members)
        .map(|(x, y)| x.since(y))
        .collect();
    let workers = &per[..p.threads];
    let mut t = tiermem::team::MemberStats::default();
    for m in &per {
        t.add(m);
    }
    let tlb = sc(S_TLB1).saturating_sub(sc(S_TLB0));
    let seconds = sc(S_ITERS_NS) as f64 / 1e9;
    progress(&format!(
        "[{}] {seconds:.2}s, {} evictions, {tlb} TLB IPIs",
        mode.name, t.evictions
    ));
    let sum_check = checksum(&team.as_mut_slice::<f64>()[..2 * n * n], n, iters);
    let faults = t.faults();
    let detail = TeamDetail {
        workers_are: if mode.kind == TeamKind::Processes {
            "processes"
        } else {
            "threads"
        }
        .into(),
        missing_faults: t.missing_faults,
        minor_faults: t.minor_faults,
        victims: [
            t.victims_unmapped,
            t.victims_self,
            t.victims_other,
            t.victims_many,
        ],
        ipis_per_eviction: if t.evictions > 0 {
            tlb as f64 / t.evictions as f64
        } else {
            0.0
        },
        evict_ns_per_page: if t.evictions > 0 {
            t.evict_ns as f64 / t.evictions as f64
        } else {
            0.0
        },
        ns_per_fault: if faults > 0 {
            t.fault_ns as f64 / faults as f64
        } else {
            0.0
        },
        evict_batch,
        readahead: mode.readahead,
        wp_faults: t.wp_faults,
        clean_evictions: t.clean_evictions,
    };
    Ok(StencilOutcome {
        mode: mode.name.clone(),
        seconds,
        init_seconds: sc(S_INIT_NS) as f64 / 1e9,
        iter_seconds: (0..iters.min(scratch.len() - S_ITER))
            .map(|k| sc(S_ITER + k) as f64 / 1e9)
            .collect(),
        checksum: sum_check,
        faults,
        evictions: t.evictions,
        bytes_in: t.bytes_in,
        bytes_out: t.bytes_out,
        tlb_shootdowns: tlb,
        evict_calls: t.evict_calls,
        faults_per_thread: workers.iter().map(|m| m.faults()).collect(),
        demand_faults_per_thread: workers.iter().map(|m| m.missing_faults).collect(),
        thread_cpus: (0..p.threads)
            .map(|r| (!p.cpus.is_empty()).then(|| p.cpus[r % p.cpus.len()]))
            .collect(),
        cost_ns: t.costs(),
        config: format!(
            "team of {} {}, {} MiB over {} MiB, policy {}, batch {evict_batch}, read-ahead {}",
            p.threads,
            detail.workers_are,
            virt >> 20,
            if mode.full_budget {
                virt >> 20
            } else {
                near as usize >> 20
            },
            mode.policy.name(),
            mode.readahead
        ),
        threads: p.threads,
        policy: mode.policy.name().into(),
        team: Some(detail),
        fault_around: [
            t.around_clusters,
            t.around_installed,
            t.around_used,
            t.around_unused,
        ],
        ..Default::default()
    })
}

/// One run of [`evict_own_pages`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct OwnEviction {
    /// `regular` (threads) or `pspt` (processes).
    pub mode: String,
    /// Pages evicted (all mapped by the evicting worker only).
    pub evictions: u64,
    /// Of those, pages another worker mapped (should be 0).
    pub victims_shared: u64,
    /// TLB-shootdown IPIs (machine-wide) per evicted page.
    pub ipis_per_eviction: f64,
    /// Unmap (punch) time per evicted page, ns.
    pub unmap_ns_per_page: f64,
    /// Whole eviction (splice, punch, splice) per evicted page, ns.
    pub evict_ns_per_page: f64,
    /// Pages per eviction call.
    pub evict_batch: usize,
    /// CPUs of worker 0 (evicting) and worker 1 (spinning).
    pub cpus: Vec<usize>,
}

/// The done-when measurement of paper 1's claim: worker 0 streams through
/// pages only it maps, so every eviction is of its own page, while worker
/// 1 keeps the other CPU busy on private memory outside the region. With threads
/// (one page table) each unmap must interrupt worker 1's CPU; with
/// processes (a page table each) it need not.
pub fn evict_own_pages(kind: TeamKind, batch: usize, cpus: &[usize]) -> Result<OwnEviction, String> {
    const MIB: usize = 1 << 20;
    let mut cfg = TeamConfig::new(64 * MIB, 16 * MIB, 2);
    cfg.cpus = cpus.to_vec();
    cfg.evict_batch_pages = batch;
    let team = TeamRegion::new(cfg).map_err(|e| e.to_string())?;
    let own = 4 * MIB / 8; // worker 1's private words
    team.run(kind, |w| {
        let g = w.atomics();
        let s = w.scratch();
        if w.rank() == 1 {
            // Busy on private memory outside the region until worker 0 is
            // done: its CPU runs this process (threads) or another one.
            let local = vec![1u64; own];
            w.barrier()?;
            let mut sum = 0u64;
            while s[0].load(Ordering::Acquire) == 0 {
                for x in local.iter().step_by(64) {
                    sum = sum.wrapping_add(std::hint::black_box(*x));
                }
            }
            s[1].store(sum, Ordering::Relaxed);
            return w.barrier();
        }
        w.barrier()?;
        // Two passes over 64 MiB beyond worker 1's pages: the first fills
        // the budget, the second evicts only worker 0's own pages.
        for x in g.iter().step_by(512) {
            x.store(2, Ordering::Relaxed);
        }
        w.mark(0);
        s[2].store(tiermem_sys::interrupts::tlb_shootdowns(), Ordering::Relaxed);
        for x in g.iter().step_by(512) {
            x.store(3, Ordering::Relaxed);
        }
        s[3].store(tiermem_sys::interrupts::tlb_shootdowns(), Ordering::Relaxed);
        w.mark(1);
        s[0].store(1, Ordering::Release);
        w.barrier()
    })
    .map_err(|e| e.to_string())?;
    let (a, b) = (team.stats_at_mark(0), team.stats_at_mark(1));
    let d = b.members[0].since(&a.members[0]);
    let ipis = team.scratch()[3].load(Ordering::Relaxed) - team.scratch()[2].load(Ordering::Relaxed);
    let per = |x: f64| {
        if d.evictions > 0 {
            x / d.evictions as f64
        } else {
            0.0
        }
    };
    Ok(OwnEviction {
        mode: if kind == TeamKind::Processes {
            "pspt"
        } else {
            "regular"
        }
        .into(),
        evictions: d.evictions,
        victims_shared: d.victims_other + d.victims_many,
        ipis_per_eviction: per(ipis as f64),
        unmap_ns_per_page: per(d.cost_ns[tiermem::stats::Cost::Tlb as usize] as f64),
        evict_ns_per_page: per(d.evict_ns as f64),
        evict_batch: batch,
        cpus: cpus.to_vec(),
    })
}
