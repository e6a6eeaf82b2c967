//! `tiermem bench stencil`: paper 1's 2D 9-point heat-diffusion kernel on
//! two grids of doubles (source and destination, swapped each iteration),
//! rows split statically among threads pinned to CPUs (paper 1, IV.A:
//! "threads divide the computation area among each other and only the
//! borders are used for exchanging information").
//!
//! Modes, run interleaved in one invocation:
//! - `none`: a tiermem region whose budget holds everything (no data
//!   movement once initialised);
//! - `sync`: a tiered region with `--near` bytes of near memory, data moved
//!   synchronously in the faults (one run per fault path / dirty tracking
//!   asked for);
//! - `kernel-swap`: plain memory in a child process inside a memory cgroup
//!   limited to `--near`, with swap on zram or a swap file (root only).
//!
//! Only the iterations are timed; initialisation (first touch of every
//! page) and the checksum pass are reported separately. Every mode computes
//! bit-identical grids, so the checksums must match.

use crate::report::Machine;
use rayon::{ThreadPool, ThreadPoolBuilder};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The kernel's weights: centre, edge neighbours, corner neighbours (sum 1).
const C0: f64 = 0.5;
const C1: f64 = 0.1;
const C2: f64 = 0.025;

/// What to compute.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StencilParams {
    /// Grid edge (each grid is n x n doubles; both together 16 n^2 bytes).
    pub n: usize,
    /// Application threads.
    pub threads: usize,
    /// Iterations.
    pub iters: usize,
    /// CPUs to pin threads to, round robin (empty: unpinned).
    pub cpus: Vec<usize>,
}

impl StencilParams {
    /// The largest grid whose two copies fit in `bytes`.
    pub fn edge_for(bytes: u64) -> usize {
        ((bytes / 16) as f64).sqrt().floor() as usize
    }
    /// Bytes of both grids.
    pub fn footprint(&self) -> u64 {
        16 * (self.n as u64) * (self.n as u64)
    }
}

/// The measurements of one run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StencilOutcome {
    /// Mode name.
    pub mode: String,
    /// Wall time of the timed iterations.
    pub seconds: f64,
    /// Initialisation (first touch of both grids).
    pub init_seconds: f64,
    /// Per-iteration times.
    pub iter_seconds: Vec<f64>,
    /// Checksum of the final grid (sum and bit hash).
    pub checksum: String,
    /// Page faults during the iterations (tiermem: fills + write-protect
    /// faults; kernel: major + minor faults).
    pub faults: u64,
    /// Pages evicted during the iterations (kernel: pages swapped out).
    pub evictions: u64,
    /// Bytes read from the far store / swap during the iterations.
    pub bytes_in: u64,
    /// Bytes written to the far store / swap during the iterations.
    pub bytes_out: u64,
    /// TLB-shootdown IPIs on the machine during the iterations.
    pub tlb_shootdowns: u64,
    /// Unmap calls for eviction (tiermem only).
    pub evict_calls: u64,
    /// Write-protect faults (tiermem only).
    pub wp_faults: u64,
    /// Page faults per application thread (index = thread), timed part.
    pub faults_per_thread: Vec<u64>,
    /// CPU each application thread was pinned to (none: unpinned).
    pub thread_cpus: Vec<Option<usize>>,
    /// Time per cost category in ns (paper 1 Fig. 6), tiermem only.
    pub cost_ns: Vec<(String, u64)>,
    /// Fault service time p50/p99 in ns (inside the handler), tiermem only.
    pub fault_p50_ns: u64,
    /// See `fault_p50_ns`.
    pub fault_p99_ns: u64,
    /// Configuration of the region, or of the cgroup and swap.
    pub config: String,
    /// Extra runtime over `none`, as a fraction (filled in by the driver).
    pub overhead_vs_none: Option<f64>,
    /// Application threads.
    pub threads: usize,
    /// Replacement policy (tiermem modes).
    pub policy: String,
    /// Mover threads and their CPUs (prefetch modes).
    pub movers: usize,
    /// CPUs the movers were pinned to.
    pub mover_cpus: Vec<usize>,
    /// Demand faults per application thread (same as `faults_per_thread`).
    pub demand_faults_per_thread: Vec<u64>,
    /// Pages asked for by the prefetcher.
    pub prefetch_issued: u64,
    /// Prefetched pages used.
    pub prefetch_used: u64,
    /// Prefetched pages evicted unused.
    pub prefetch_wasted: u64,
    /// Demand faults on a stream's trigger page (expected: one per half
    /// window).
    #[serde(default)]
    pub prefetch_triggers: u64,
    /// Demand faults inside an issued window off its trigger (the mover was
    /// late, or the page was evicted before use).
    #[serde(default)]
    pub prefetch_late: u64,
    /// Halvings of the prefetch window cap under waste.
    #[serde(default)]
    pub prefetch_shrinks: u64,
    /// Pages late-faulting threads filled themselves up to the trigger.
    #[serde(default)]
    pub prefetch_inline: u64,
    /// Prefetched, unused victims given a second chance by eviction.
    #[serde(default)]
    pub prefetch_spared: u64,
    /// Requested pages movers skipped because the thread had passed them.
    #[serde(default)]
    pub prefetch_stale: u64,
    /// Fault-around: demand faults that brought neighbours, the
    /// neighbours installed, those known used, those evicted unused.
    #[serde(default)]
    pub fault_around: [u64; 4],
    /// Stride detection: points installed ahead, their neighbours, points
    /// known used, evicted unused.
    #[serde(default)]
    pub stride: [u64; 4],
    /// Pages filled by movers.
    pub mover_fills: u64,
    /// Pages evicted by faulting threads themselves.
    pub inline_evictions: u64,
    /// CPU time of the application threads over the timed iterations, ns
    /// (tiered modes): compute plus their own fills, evictions and waits.
    #[serde(default)]
    pub app_cpu_ns: u64,
    /// Times application threads waited for a page in flight.
    #[serde(default)]
    pub waits_in_flight: u64,
    /// Wall time those waits took, ns.
    #[serde(default)]
    pub wait_in_flight_ns: u64,
    /// Times movers paused asynchronous eviction (scattered victims).
    pub eviction_pauses: u64,
    /// Time per cost category spent by movers, ns.
    pub mover_cost_ns: Vec<(String, u64)>,
    /// The mover threads' own work: time busy, pages in and out, and the
    /// install (UFFDIO_COPY) and unmap calls they issued.
    #[serde(default)]
    pub mover_work: tiermem::stats::MoverWork,
    /// Mover time per 4 KiB page moved (one in plus one out), ns.
    #[serde(default)]
    pub mover_ns_per_page: Option<f64>,
    /// Lower bound: max(none runtime, bytes moved / memcpy bandwidth).
    pub lower_bound_seconds: Option<f64>,
    /// Runtime over the lower bound.
    pub vs_lower_bound: Option<f64>,
    /// Team modes (regular / pspt): sharing and eviction details.
    pub team: Option<TeamDetail>,
}

/// What team modes measure beyond the common fields (timed part only).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TeamDetail {
    /// `processes` (pspt) or `threads` (regular).
    pub workers_are: String,
    /// Missing faults (fills) and minor faults (mapping a near page in one
    /// more worker).
    pub missing_faults: u64,
    /// See `missing_faults`.
    pub minor_faults: u64,
    /// Evicted pages by who mapped them: nobody, the evicting worker only,
    /// one other worker, several.
    pub victims: [u64; 4],
    /// TLB-shootdown IPIs (machine-wide) per evicted page.
    pub ipis_per_eviction: f64,
    /// Time spent evicting per evicted page (splice, punch, splice), ns.
    pub evict_ns_per_page: f64,
    /// Fault-handler time per fault, ns.
    pub ns_per_fault: f64,
    /// Replacement policy, eviction batch, read-ahead.
    pub evict_batch: usize,
    /// Pages filled per missing fault.
    pub readahead: usize,
    /// Writes to pages mapped write-protected (dirty tracking).
    #[serde(default)]
    pub wp_faults: u64,
    /// Evicted pages that were clean (punched, not written back).
    #[serde(default)]
    pub clean_evictions: u64,
}

pub(crate) fn init_value(i: usize, j: usize) -> f64 {
    // Deterministic, incompressible-looking values in [0, 1): zram must not
    // get an unrealistically easy ride from constant pages.
    let mut x = (i as u64) << 32 | j as u64;
    x ^= x >> 31;
    x = x.wrapping_mul(0x7fb5_d329_728e_a185);
    x ^= x >> 27;
    x = x.wrapping_mul(0x81da_def4_bc2d_d44d);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// One worker's rows for a sweep: (first row, the rows), taken once.
type Share<'a> = Mutex<Option<(usize, &'a mut [f64])>>;

/// A pool of `threads` pinned workers; records each worker's thread id.
pub struct Workers {
    pool: ThreadPool,
    tids: Arc<Vec<AtomicU32>>,
    cpus: Vec<Option<usize>>,
}

impl Workers {
    /// The CPU each worker is pinned to (None: unpinned).
    pub fn cpus(&self) -> &[Option<usize>] {
        &self.cpus
    }

    /// Starts the workers.
    pub fn new(threads: usize, cpus: &[usize]) -> Workers {
        let tids: Arc<Vec<AtomicU32>> = Arc::new((0..threads).map(|_| AtomicU32::new(0)).collect());
        let t2 = tids.clone();
        let pinned: Vec<Option<usize>> = (0..threads)
            .map(|i| (!cpus.is_empty()).then(|| cpus[i % cpus.len()]))
            .collect();
        let p2 = pinned.clone();
        let pool = ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("stencil-{i}"))
            .start_handler(move |i| {
                if let Some(c) = p2[i] {
                    if let Err(e) = tiermem_sys::thread::set_affinity(&[c]) {
                        eprintln!("warning: stencil-{i}: pinning to CPU {c} failed: {e}");
                    }
                }
                t2[i].store(tiermem_sys::thread::gettid(), Ordering::Relaxed);
            })
            .build()
            .expect("thread pool");
        // Make sure every worker has started and recorded its id.
        pool.broadcast(|_| ());
        Workers {
            pool,
            tids,
            cpus: pinned,
        }
    }

    /// The workers' CPU time so far, summed (user + system: their own
    /// faults and fills included).
    pub fn cpu_time(&self) -> std::time::Duration {
        self.pool
            .broadcast(|_| tiermem_sys::thread::thread_cpu_time())
            .into_iter()
            .sum()
    }

    /// Thread ids by worker index.
    pub fn tids(&self) -> Vec<u32> {
        self.tids.iter().map(|t| t.load(Ordering::Relaxed)).collect()
    }

    /// Runs `f(worker, rows)` on every worker with its share of rows 1..n-1
    /// of `dst`, given as (first row, the rows' slice).
    fn for_rows(
        &self,
        n: usize,
        first: usize,
        last: usize,
        dst: &mut [f64],
        f: impl Fn(usize, usize, &mut [f64]) + Sync,
    ) {
        let t = self.pool.current_num_threads();
        let rows = last - first;
        let mut parts: Vec<Share<'_>> = Vec::with_capacity(t);
        let mut rest = &mut dst[first * n..last * n];
        let mut row = first;
        for k in 0..t {
            let take = rows * (k + 1) / t - rows * k / t;
            let (mine, tail) = rest.split_at_mut(take * n);
            parts.push(Mutex::new(Some((row, mine))));
            rest = tail;
            row += take;
        }
        self.pool.broadcast(|ctx| {
            let (r0, slice) = parts[ctx.index()]
                .lock()
                .unwrap()
                .take()
                .expect("one share per worker");
            f(ctx.index(), r0, slice);
        });
    }
}

/// Writes the initial values into both grids (`grid` holds 2 n^2 doubles).
pub fn init(grid: &mut [f64], n: usize, w: &Workers) {
    let (a, b) = grid[..2 * n * n].split_at_mut(n * n);
    for g in [a, b] {
        w.for_rows(n, 0, n, g, |_, r0, rows| {
            for (k, row) in rows.chunks_mut(n).enumerate() {
                for (j, x) in row.iter_mut().enumerate() {
                    *x = init_value(r0 + k, j);
                }
            }
        });
    }
}

/// One sweep: `dst` rows 1..n-1 from `src`.
fn sweep(src: &[f64], dst: &mut [f64], n: usize, w: &Workers) {
    w.for_rows(n, 1, n - 1, dst, |_, r0, rows| {
        for (k, out) in rows.chunks_mut(n).enumerate() {
            let i = r0 + k;
            let up = &src[(i - 1) * n..i * n];
            let mid = &src[i * n..(i + 1) * n];
            let dn = &src[(i + 1) * n..(i + 2) * n];
            row_kernel(up, mid, dn, out);
        }
    });
}

/// One output row from the rows above, at and below it (all `n` long);
/// the first and last element of `out` are boundary and left alone.
pub(crate) fn row_kernel(up: &[f64], mid: &[f64], dn: &[f64], out: &mut [f64]) {
    let n = out.len();
    for j in 1..n - 1 {
        out[j] = C0 * mid[j]
            + C1 * (up[j] + dn[j] + mid[j - 1] + mid[j + 1])
            + C2 * (up[j - 1] + up[j + 1] + dn[j - 1] + dn[j + 1]);
    }
}

/// Runs `iters` sweeps, alternating the grids; calls `each(iter, seconds)`.
pub fn iterate(
    grid: &mut [f64],
    n: usize,
    iters: usize,
    w: &Workers,
    mut each: impl FnMut(usize, f64),
) -> Vec<f64> {
    let mut times = Vec::with_capacity(iters);
    for it in 0..iters {
        let t = Instant::now();
        let (a, b) = grid[..2 * n * n].split_at_mut(n * n);
        if it % 2 == 0 {
            sweep(a, b, n, w);
        } else {
            sweep(b, a, n, w);
        }
        let s = t.elapsed().as_secs_f64();
        times.push(s);
        each(it, s);
    }
    times
}

/// Checksum of the grid the last iteration wrote.
pub fn checksum(grid: &[f64], n: usize, iters: usize) -> String {
    let g = if iters.is_multiple_of(2) {
        &grid[..n * n]
    } else {
        &grid[n * n..2 * n * n]
    };
    let mut sum = 0.0f64;
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for x in g {
        sum += *x;
        h = (h ^ x.to_bits()).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{sum:.10e}/{h:016x}")
}

/// Runs init, iterations and checksum on `grid`; `sample` is called right
/// before and after the timed part (to snapshot counters).
pub fn run_on(
    grid: &mut [f64],
    p: &StencilParams,
    w: &Workers,
    mode: &str,
    mut before_timed: impl FnMut(),
    mut progress: impl FnMut(&str),
) -> StencilOutcome {
    let t = Instant::now();
    init(grid, p.n, w);
    let init_seconds = t.elapsed().as_secs_f64();
    progress(&format!(
        "[{mode}] initialised {} in {init_seconds:.2}s",
        crate::report::mib(p.footprint()) + " MiB"
    ));
    before_timed();
    let t = Instant::now();
    let iter_seconds = iterate(grid, p.n, p.iters, w, |it, s| {
        progress(&format!("[{mode}] iteration {}/{}: {s:.3}s", it + 1, p.iters));
    });
    let seconds = t.elapsed().as_secs_f64();
    StencilOutcome {
        mode: mode.into(),
        seconds,
        init_seconds,
        iter_seconds,
        thread_cpus: w.cpus.clone(),
        ..Default::default()
    }
}

/// Arguments of the kernel-swap child (`tiermem bench stencil-child`).
pub fn child_args(p: &StencilParams) -> Vec<String> {
    vec![
        "bench".into(),
        "stencil-child".into(),
        "--params".into(),
        serde_json::to_string(p).expect("params serialise"),
    ]
}

/// The whole result file of `tiermem bench stencil`.
#[derive(Clone, Debug, Serialize)]
pub struct StencilResult {
    /// Always "stencil".
    pub benchmark: &'static str,
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Virtual bytes asked for.
    pub virt_bytes: u64,
    /// Near budget.
    pub near_bytes: u64,
    /// Page size.
    pub page_size: String,
    /// Parameters.
    pub params: StencilParams,
    /// Whether all checksums matched.
    pub checksums_match: bool,
    /// Streaming memcpy bandwidth measured in this run, bytes/s.
    pub memcpy_bytes_per_s: f64,
    /// One record per mode run.
    pub results: Vec<StencilOutcome>,
    /// Modes that could not run, with the reason.
    pub skipped: Vec<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_are_identical_for_any_thread_count() {
        let n = 64;
        let mut sums = Vec::new();
        for threads in [1, 2, 3] {
            let w = Workers::new(threads, &[]);
            let mut g = vec![0.0; 2 * n * n];
            let p = StencilParams {
                n,
                threads,
                iters: 5,
                cpus: vec![],
            };
            let o = run_on(&mut g, &p, &w, "test", || {}, |_| {});
            assert_eq!(o.iter_seconds.len(), 5);
            assert_eq!(w.tids().iter().filter(|&&t| t != 0).count(), threads);
            sums.push(checksum(&g, n, 5));
        }
        assert_eq!(sums[0], sums[1]);
        assert_eq!(sums[1], sums[2]);
    }

    #[test]
    fn the_kernel_diffuses_and_keeps_the_boundary() {
        let n = 16;
        let w = Workers::new(1, &[]);
        let mut g = vec![0.0; 2 * n * n];
        init(&mut g, n, &w);
        let corner = g[0];
        let centre_before = g[8 * n + 8];
        iterate(&mut g, n, 1, &w, |_, _| {});
        let b = &g[n * n..];
        assert_eq!(b[0], corner, "boundary untouched");
        let a = &g[..n * n];
        let want = C0 * a[8 * n + 8]
            + C1 * (a[7 * n + 8] + a[9 * n + 8] + a[8 * n + 7] + a[8 * n + 9])
            + C2 * (a[7 * n + 7] + a[7 * n + 9] + a[9 * n + 7] + a[9 * n + 9]);
        assert_eq!(b[8 * n + 8], want);
        assert_ne!(b[8 * n + 8], centre_before);
        assert_eq!(StencilParams::edge_for(1 << 30), 8192);
    }
}
