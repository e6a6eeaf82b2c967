//! Paper 5's workloads on the shared virtual memory ([`tiermem::svm`]):
//! bucket sort, a Malstone-style log analysis and a Graph500-style BFS
//! with a read-only black list, each in
//!
//! - `spm-coherent`: every page SPM, plain shared memory (what a
//!   cache-coherent machine runs);
//! - `spm-noncoherent`: every page SPM with the noncoherent flavour
//!   (written lines flushed at release, others' lines invalidated at
//!   acquire): the paper's "SPM" baseline (Intel SMC on the SCC);
//! - `hybrid`: the paper's choice of modes per phase, SPM pages coherent
//!   (what the protocol costs over plain shared memory);
//! - `hybrid-noncoherent`: the same modes, SPM pages noncoherent (the
//!   paper's "Hybrid" on non-coherent hardware).
//!
//! Every run is verified against the single-process `spm-coherent` run
//! (a checksum of the result) and by the workload's own checks.
//!
//! The BFS runs on a Graph500 graph ([`crate::graph500`]: Kronecker
//! generator with permuted vertices, CSR by kernel 1) with its own
//! level-synchronous bottom-up BFS over the shared heap, checked by the
//! level rules (every reached vertex has a neighbour one level up, no edge
//! spans two levels, unreached vertices have no reached neighbour).

use crate::report::{command_line, Machine, Table};
use serde::Serialize;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::Instant;
use tiermem::svm::{SpmFlavour, Svm, SvmConfig, SvmMode, SvmProc, SvmStats};
use tiermem::Error;

const PAGE: usize = 4096;

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Workload {
    /// Parallel bucket sort (keys generated, bucketed, sorted per bucket,
    /// merged).
    Bucket,
    /// Malstone-A-style: ratio of compromised visits per site.
    Malstone,
    /// Bottom-up BFS with a black-list check per visited vertex.
    Bfs,
    /// A histogram built under locks: processes take tasks from a shared
    /// queue (a counter under lock 0) and add each task's counts into the
    /// shared bins, one lock per page of bins.
    Locks,
}

impl Workload {
    /// Name on command lines.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Bucket => "bucket",
            Workload::Malstone => "malstone",
            Workload::Bfs => "bfs",
            Workload::Locks => "locks",
        }
    }
    /// Parses a name.
    pub fn parse(s: &str) -> Option<Workload> {
        [
            Workload::Bucket,
            Workload::Malstone,
            Workload::Bfs,
            Workload::Locks,
        ]
        .into_iter()
        .find(|w| w.name() == s)
    }
}

/// Page-mode policy of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BenchMode {
    /// All SPM, coherent flavour.
    SpmCoherent,
    /// All SPM, noncoherent flavour.
    SpmNoncoherent,
    /// Paper's per-phase modes, SPM pages coherent.
    Hybrid,
    /// Paper's per-phase modes, SPM pages noncoherent.
    HybridNoncoherent,
    /// Every allocation DSM in every process (coherent flavour): what a
    /// DSM without SPM (ArgoDSM) does.
    Dsm,
}

impl BenchMode {
    /// Name on command lines.
    pub fn name(self) -> &'static str {
        match self {
            BenchMode::SpmCoherent => "spm-coherent",
            BenchMode::SpmNoncoherent => "spm-noncoherent",
            BenchMode::Hybrid => "hybrid",
            BenchMode::HybridNoncoherent => "hybrid-noncoherent",
            BenchMode::Dsm => "dsm",
        }
    }
    /// Parses a name.
    pub fn parse(s: &str) -> Option<BenchMode> {
        [
            BenchMode::SpmCoherent,
            BenchMode::SpmNoncoherent,
            BenchMode::Hybrid,
            BenchMode::HybridNoncoherent,
            BenchMode::Dsm,
        ]
        .into_iter()
        .find(|m| m.name() == s)
    }
    fn flavour(self) -> SpmFlavour {
        match self {
            BenchMode::SpmCoherent | BenchMode::Hybrid | BenchMode::Dsm => SpmFlavour::Coherent,
            _ => SpmFlavour::Noncoherent,
        }
    }
    fn hybrid(self) -> bool {
        matches!(self, BenchMode::Hybrid | BenchMode::HybridNoncoherent)
    }
}

/// Problem sizes.
#[derive(Clone, Debug, Serialize)]
pub struct SvmBenchParams {
    /// Bucket sort: keys (u32).
    pub keys: usize,
    /// Bucket sort: keys per bucket on average (a power of two).
    pub bucket_keys: usize,
    /// Malstone: log records (8 bytes each).
    pub records: usize,
    /// Malstone: sites.
    pub sites: usize,
    /// BFS: scale (2^scale vertices, 16 edges per vertex).
    pub scale: u32,
    /// BFS: roots searched.
    pub roots: usize,
    /// BFS: black-list entries (u64 ids; 16384 is the paper's 128 KiB).
    pub black_list: usize,
    /// Locks: items counted (u64 values hashed into bins).
    pub lock_items: usize,
    /// Locks: items per task taken from the shared queue.
    pub lock_task: usize,
    /// Locks: pages of bins (512 u64 bins each), one lock per page
    /// (at most [`LOCK_STRIPES_MAX`]).
    pub lock_stripes: usize,
}

/// The most bin pages of the lock workload (locks 1..=this; lock 0 guards
/// the queue).
pub const LOCK_STRIPES_MAX: usize = 64;
/// Bins per page of the lock workload.
const LOCK_BINS: usize = PAGE / 8;

impl Default for SvmBenchParams {
    fn default() -> Self {
        SvmBenchParams {
            keys: 4 << 20,
            bucket_keys: 256,
            records: 8 << 20,
            sites: 1 << 16,
            scale: 17,
            roots: 4,
            black_list: 16384,
            lock_items: 1 << 20,
            lock_task: 4096,
            lock_stripes: 16,
        }
    }
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct SvmRun {
    /// Workload.
    pub workload: Workload,
    /// Mode.
    pub mode: BenchMode,
    /// Processes.
    pub procs: usize,
    /// Nodes the processes spanned (1: a forked team or a one-node MPI job).
    pub nodes: usize,
    /// Repetition.
    pub rep: usize,
    /// Time of the measured part (see the workload), seconds.
    pub seconds: f64,
    /// Phases of the measured part, seconds.
    pub phases: Vec<(String, f64)>,
    /// Checksum of the result.
    pub checksum: u64,
    /// Matches the single-process run and passed the workload's checks.
    pub valid: bool,
    /// Protocol counters, summed over the processes, whole run.
    pub stats: SvmStats,
}

impl SvmRun {
    /// Page faults of the protocol (read, write, SPM write).
    pub fn faults(&self) -> u64 {
        self.stats.read_faults + self.stats.write_faults + self.stats.spm_write_faults
    }
}

// Scratch words: 0 checksum (summed), 1 errors, 2.. phase ns (rank 0).
// In an MPI job every rank has its own words, summed after the run.
const S_SUM: usize = 0;
const S_ERR: usize = 1;
const S_PHASE: usize = 2;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// `[lo, hi)` of `n` items for `rank` of `procs`.
fn share(n: usize, rank: usize, procs: usize) -> (usize, usize) {
    (n * rank / procs, n * (rank + 1) / procs)
}

fn pages(bytes: usize) -> usize {
    bytes.div_ceil(PAGE) * PAGE
}

/// Rank 0's clock for phases between barriers.
struct Phases<'a> {
    p: &'a SvmProc<'a>,
    t: Instant,
    k: usize,
}

impl<'a> Phases<'a> {
    fn start(p: &'a SvmProc<'a>) -> Result<Phases<'a>, Error> {
        p.barrier()?;
        Ok(Phases {
            p,
            t: Instant::now(),
            k: 0,
        })
    }
    /// Ends a phase at a barrier.
    fn lap(&mut self) -> Result<(), Error> {
        self.p.barrier()?;
        if self.p.rank() == 0 {
            self.p.scratch()[S_PHASE + self.k].store(self.t.elapsed().as_nanos() as u64, Relaxed);
        }
        self.t = Instant::now();
        self.k += 1;
        Ok(())
    }
}

fn fail(p: &SvmProc<'_>) {
    p.scratch()[S_ERR].fetch_add(1, Relaxed);
}

/// Collective allocation; every process puts the pages in DSM in mode
/// `dsm` (with more than one process).
fn alloc(p: &SvmProc<'_>, size: usize, mode: BenchMode) -> Result<usize, Error> {
    let a = p.malloc(size)?;
    if mode == BenchMode::Dsm && p.procs() > 1 {
        p.set_mode(a, pages(size), SvmMode::Dsm)?;
    }
    Ok(a)
}

/// In-place insertion sort of shared words (the paper uses bubble sort;
/// both are quadratic with heavy reuse of the bucket).
fn insertion_sort(a: &[AtomicU32]) {
    for i in 1..a.len() {
        let v = a[i].load(Relaxed);
        let mut j = i;
        while j > 0 {
            let u = a[j - 1].load(Relaxed);
            if u <= v {
                break;
            }
            a[j].store(u, Relaxed);
            j -= 1;
        }
        a[j].store(v, Relaxed);
    }
}

/// Bucket sort (paper IV.A). Phases: generate (keys SPM), bucket (bucket
/// array SPM), sort (hybrid: bucket array DSM), merge (read, left DSM).
fn bucket(p: &SvmProc<'_>, prm: &SvmBenchParams, mode: BenchMode) -> Result<(), Error> {
    let (me, np) = (p.rank(), p.procs());
    let n = prm.keys;
    let nb = (n / prm.bucket_keys).next_power_of_two().max(1);
    let shift = 32 - nb.trailing_zeros();
    let keys_a = alloc(p, pages(n * 4), mode)?;
    let buck_a = alloc(p, pages(n * 4), mode)?;
    let counts_a = alloc(p, pages(np * nb * 4), mode)?;
    let keys = p.u32s(keys_a, n)?;
    let buck = p.u32s(buck_a, n)?;
    let counts = p.u32s(counts_a, np * nb)?;
    let bucket_of = |k: u32| if shift == 32 { 0 } else { (k >> shift) as usize };
    let mut ph = Phases::start(p)?;
    // 1. Generate keys in parallel (sequential writes, SPM).
    let (lo, hi) = share(n, me, np);
    for (i, k) in keys.iter().enumerate().take(hi).skip(lo) {
        k.store(mix(i as u64 ^ 0x5eed) as u32, Relaxed);
    }
    ph.lap()?;
    // 2. Bucket: histogram of my slice, offsets, scatter.
    let mut hist = vec![0u32; nb];
    for k in &keys[lo..hi] {
        hist[bucket_of(k.load(Relaxed))] += 1;
    }
    for (b, &h) in hist.iter().enumerate() {
        counts[me * nb + b].store(h, Relaxed);
    }
    p.barrier()?;
    let mut start = vec![0usize; nb + 1];
    let mut mine = vec![0usize; nb];
    for b in 0..nb {
        let mut s = start[b];
        for r in 0..np {
            if r == me {
                mine[b] = s;
            }
            s += counts[r * nb + b].load(Relaxed) as usize;
        }
        start[b + 1] = s;
    }
    for k in &keys[lo..hi] {
        let v = k.load(Relaxed);
        let b = bucket_of(v);
        buck[mine[b]].store(v, Relaxed);
        mine[b] += 1;
    }
    ph.lap()?;
    // 3. Sort my buckets (intense reuse: DSM in hybrid).
    // The bucket array goes DSM (the paper's choice): each process faults
    // in only its own buckets' pages; the edge pages shared with a
    // neighbour have two writers, merged by the diffs.
    if mode.hybrid() && np > 1 {
        p.set_mode(buck_a, pages(n * 4), SvmMode::Dsm)?;
    }
    let (blo, bhi) = share(nb, me, np);
    for b in blo..bhi {
        insertion_sort(&buck[start[b]..start[b + 1]]);
    }
    ph.lap()?;
    // 4. Merge: check my range is sorted and fold it into the checksum.
    let (lo, hi) = (start[blo], start[bhi]);
    let mut sum = 0u64;
    let mut prev = if lo > 0 { buck[lo - 1].load(Relaxed) } else { 0 };
    for (i, k) in buck.iter().enumerate().take(hi).skip(lo) {
        let v = k.load(Relaxed);
        if v < prev {
            fail(p);
        }
        prev = v;
        sum = sum.wrapping_add(mix(v as u64).wrapping_mul(i as u64 + 1));
    }
    p.scratch()[S_SUM].fetch_add(sum, Relaxed);
    ph.lap()
}

/// Malstone A (paper IV.B): per site, the visits and the visits by
/// compromised visitors. Phases: generate (log SPM), count (each process
/// into its own table: DSM in hybrid), reduce (per site over the tables).
fn malstone(p: &SvmProc<'_>, prm: &SvmBenchParams, mode: BenchMode) -> Result<(), Error> {
    let (me, np) = (p.rank(), p.procs());
    let (n, s) = (prm.records, prm.sites);
    let log_a = alloc(p, pages(n * 8), mode)?;
    let tab_bytes = pages(2 * s * 4);
    let tabs_a = alloc(p, tab_bytes * np, mode)?;
    let res_a = alloc(p, pages(2 * s * 4), mode)?;
    let log = p.u64s(log_a, n)?;
    let res = p.u32s(res_a, 2 * s)?;
    let mut ph = Phases::start(p)?;
    let (lo, hi) = share(n, me, np);
    for (i, r) in log.iter().enumerate().take(hi).skip(lo) {
        let h = mix(i as u64 ^ 0x3a1);
        // Skewed sites (a few popular ones), visitors, ~1/8 compromised.
        let site = (h % s as u64) * ((h >> 20) % s as u64) / s as u64;
        let visitor = (h >> 32) & 0x7fff_ffff;
        let bad = (mix(visitor) % 8 == 0) as u64;
        r.store(site | visitor << 32 | bad << 63, Relaxed);
    }
    ph.lap()?;
    if mode.hybrid() && np > 1 {
        p.set_mode(tabs_a + me * tab_bytes, tab_bytes, SvmMode::Dsm)?;
    }
    let tab = p.u32s(tabs_a + me * tab_bytes, 2 * s)?;
    for r in &log[lo..hi] {
        let v = r.load(Relaxed);
        let site = (v & 0xffff_ffff) as usize;
        tab[2 * site].store(tab[2 * site].load(Relaxed) + 1, Relaxed);
        if v >> 63 != 0 {
            tab[2 * site + 1].store(tab[2 * site + 1].load(Relaxed) + 1, Relaxed);
        }
    }
    ph.lap()?;
    let (slo, shi) = share(s, me, np);
    let mut sum = 0u64;
    let tabs = (0..np)
        .map(|r| p.u32s(tabs_a + r * tab_bytes, 2 * s))
        .collect::<Result<Vec<_>, _>>()?;
    for site in slo..shi {
        let (mut visits, mut bad) = (0u32, 0u32);
        for t in &tabs {
            visits += t[2 * site].load(Relaxed);
            bad += t[2 * site + 1].load(Relaxed);
        }
        res[2 * site].store(visits, Relaxed);
        res[2 * site + 1].store(bad, Relaxed);
        // The ratio, as the checksum sees it (exact for equal counts).
        let ratio = if visits == 0 {
            0.0
        } else {
            bad as f64 / visits as f64
        };
        sum = sum.wrapping_add(mix(site as u64 ^ (visits as u64) << 32 ^ ratio.to_bits()));
    }
    p.scratch()[S_SUM].fetch_add(sum, Relaxed);
    ph.lap()?;
    // Check: every record counted once.
    if me == 0 {
        let total: u64 = (0..s).map(|i| res[2 * i].load(Relaxed) as u64).sum();
        if total != n as u64 {
            fail(p);
        }
    }
    Ok(())
}

const INF: u32 = u32::MAX;
/// Seed of the Graph500 generator (the same graph for every mode and
/// process count).
const GRAPH_SEED: u64 = 0x5356_4d00;

/// Graph500-style BFS with a black list (paper IV.C). The graph is built
/// by rank 0 (not timed); the timed part is the BFS kernel over `roots`
/// roots. Level-synchronous bottom-up: each process finds parents for its
/// own unvisited vertices, so every page of the level array has one
/// writer; a discovered vertex's neighbours are looked up in the black
/// list (binary search; read-only private in hybrid, as in the paper).
fn bfs(p: &SvmProc<'_>, prm: &SvmBenchParams, mode: BenchMode) -> Result<(), Error> {
    let (me, np) = (p.rank(), p.procs());
    let nv = 1usize << prm.scale;
    let ne = 16 * nv;
    let off_a = alloc(p, pages((nv + 1) * 4), mode)?;
    let adj_a = alloc(p, pages(2 * ne * 4), mode)?;
    let level_a = alloc(p, pages(nv * 4), mode)?;
    let black_a = alloc(p, pages(prm.black_list * 8), mode)?;
    let off = p.u32s(off_a, nv + 1)?;
    let adj = p.u32s(adj_a, 2 * ne)?;
    let level = p.u32s(level_a, nv)?;
    let black = p.u64s(black_a, prm.black_list)?;
    if me == 0 {
        let mut edges = vec![[0u32; 2]; ne];
        crate::graph500::generate_edges(prm.scale, GRAPH_SEED, &mut edges, 1);
        let mut offsets = vec![0u64; nv + 1];
        let mut adjacency = vec![0u32; 2 * ne];
        let used = crate::graph500::build_csr(&edges, &mut offsets, &mut adjacency);
        for (o, &x) in off.iter().zip(&offsets) {
            o.store(x as u32, Relaxed);
        }
        for (a, &x) in adj.iter().zip(&adjacency[..used]) {
            a.store(x, Relaxed);
        }
        let mut bl: Vec<u64> = (0..prm.black_list as u64)
            .map(|i| mix(i ^ 0xb1ac) % nv as u64)
            .collect();
        bl.sort_unstable();
        for (x, &v) in black.iter().zip(&bl) {
            x.store(v, Relaxed);
        }
    }
    p.barrier()?;
    // The paper's choice: the black list read-only private (cached), the
    // rest SPM. (The level array is read everywhere and written by its
    // owner every level: in DSM every level would refetch the others'
    // pages.)
    if mode.hybrid() && np > 1 {
        p.hint_read_only(black_a, pages(prm.black_list * 8))?;
    }
    let blacklisted = |v: u32| {
        let (mut lo, mut hi) = (0usize, black.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let x = black[mid].load(Relaxed);
            if x == v as u64 {
                return true;
            }
            if x < v as u64 {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        false
    };
    let nbrs = |v: usize| {
        let (a, b) = (off[v].load(Relaxed) as usize, off[v + 1].load(Relaxed) as usize);
        adj[a..b].iter().map(|x| x.load(Relaxed))
    };
    // Roots: vertices with neighbours, chosen by hash.
    let roots: Vec<usize> = (0u64..)
        .map(|i| (mix(i ^ 0x200f) % nv as u64) as usize)
        .filter(|&v| nbrs(v).next().is_some())
        .take(prm.roots)
        .collect();
    let (lo, hi) = share(nv, me, np);
    let mut ph = Phases::start(p)?;
    let mut sum = 0u64;
    let mut linking_all = 0u64;
    for &root in &roots {
        for (v, l) in level.iter().enumerate().take(hi).skip(lo) {
            l.store(if v == root { 0 } else { INF }, Relaxed);
        }
        let mut found_total = 1u64;
        let mut found_here = 0u64;
        let mut depth = 0u32;
        let mut linking = 0u64;
        p.barrier()?;
        loop {
            let mut found = 0u64;
            for v in lo..hi {
                if level[v].load(Relaxed) != INF {
                    continue;
                }
                if nbrs(v).any(|u| level[u as usize].load(Relaxed) == depth) {
                    level[v].store(depth + 1, Relaxed);
                    found += 1;
                    if nbrs(v).any(blacklisted) {
                        linking += 1;
                    }
                }
            }
            found_here += found;
            // The level's writes visible everywhere, then the count of
            // vertices found so far (a reduction outside the SVM).
            p.barrier()?;
            let total = p.allreduce_sum(found_here)? + 1;
            if total == found_total {
                break;
            }
            found_total = total;
            depth += 1;
        }
        // Validate my vertices: a parent one level up; no edge spans two.
        for v in lo..hi {
            let l = level[v].load(Relaxed);
            if l == INF {
                if nbrs(v).any(|u| level[u as usize].load(Relaxed) != INF) {
                    fail(p);
                }
                continue;
            }
            if l > 0 && !nbrs(v).any(|u| level[u as usize].load(Relaxed) == l - 1) {
                fail(p);
            }
            if nbrs(v).any(|u| level[u as usize].load(Relaxed).abs_diff(l) > 1) {
                fail(p);
            }
            sum = sum.wrapping_add(mix(v as u64 ^ (l as u64) << 32));
        }
        linking_all += linking;
        p.barrier()?;
    }
    p.scratch()[S_SUM].fetch_add(sum, Relaxed);
    ph.lap()?;
    // Users linking to the black list, over all roots.
    let link = p.allreduce_sum(linking_all)?;
    if me == 0 {
        p.scratch()[S_SUM].fetch_add(mix(link), Relaxed);
    }
    Ok(())
}

/// A histogram under locks (a shared work queue and striped bins): the
/// items (`lock_items` hashes) are cut into tasks of `lock_task` items;
/// each process takes the next task number from a counter under lock 0,
/// counts the task's items into a private histogram, then adds it into
/// the shared bins page by page, each page under its own lock (`1 + page`,
/// starting at a page that depends on the rank so that processes do not
/// queue on the same lock). Every update is a read-modify-write of shared
/// words inside a critical section: the time goes to taking locks and to
/// the consistency actions at acquire and release. Phases: update (until
/// the queue is empty), reduce (each process folds its share of the bins
/// into the checksum; the sum of the bins must be `lock_items`). The bins
/// are DSM in hybrid (written by every process, under locks).
fn locks(p: &SvmProc<'_>, prm: &SvmBenchParams, mode: BenchMode) -> Result<(), Error> {
    let (me, np) = (p.rank(), p.procs());
    let stripes = prm.lock_stripes.clamp(1, LOCK_STRIPES_MAX);
    let nbins = stripes * LOCK_BINS;
    let task = prm.lock_task.max(1);
    let tasks = prm.lock_items.div_ceil(task);
    let queue_a = alloc(p, PAGE, mode)?;
    let bins_a = alloc(p, stripes * PAGE, mode)?;
    if mode.hybrid() && np > 1 {
        p.set_mode(bins_a, stripes * PAGE, SvmMode::Dsm)?;
    }
    let queue = p.u64s(queue_a, 1)?;
    let bins = p.u64s(bins_a, nbins)?;
    let mut ph = Phases::start(p)?;
    let mut local = vec![0u64; nbins];
    loop {
        p.lock(0)?;
        let t = queue[0].load(Relaxed);
        if t < tasks as u64 {
            queue[0].store(t + 1, Relaxed);
        }
        p.unlock(0)?;
        if t >= tasks as u64 {
            break;
        }
        let t = t as usize;
        local.iter_mut().for_each(|x| *x = 0);
        for i in t * task..((t + 1) * task).min(prm.lock_items) {
            local[(mix(i as u64 ^ 0x10c5) % nbins as u64) as usize] += 1;
        }
        for k in 0..stripes {
            let s = (k + me) % stripes;
            p.lock(1 + s)?;
            for (b, &c) in bins[s * LOCK_BINS..(s + 1) * LOCK_BINS]
                .iter()
                .zip(&local[s * LOCK_BINS..(s + 1) * LOCK_BINS])
            {
                if c != 0 {
                    b.store(b.load(Relaxed) + c, Relaxed);
                }
            }
            p.unlock(1 + s)?;
        }
    }
    ph.lap()?;
    let (lo, hi) = share(nbins, me, np);
    let mut sum = 0u64;
    for (i, b) in bins.iter().enumerate().take(hi).skip(lo) {
        sum = sum.wrapping_add(mix(i as u64 ^ b.load(Relaxed) << 32));
    }
    p.scratch()[S_SUM].fetch_add(sum, Relaxed);
    ph.lap()?;
    if me == 0 {
        let total: u64 = bins.iter().map(|b| b.load(Relaxed)).sum();
        if total != prm.lock_items as u64 || queue[0].load(Relaxed) != tasks as u64 {
            fail(p);
        }
    }
    Ok(())
}

fn heap_bytes(w: Workload, prm: &SvmBenchParams, procs: usize) -> usize {
    let slack = 16 * PAGE;
    slack
        + match w {
            Workload::Bucket => {
                let nb = (prm.keys / prm.bucket_keys).next_power_of_two().max(1);
                2 * pages(prm.keys * 4) + pages(procs * nb * 4)
            }
            Workload::Malstone => pages(prm.records * 8) + (procs + 1) * pages(2 * prm.sites * 4),
            Workload::Bfs => {
                let nv = 1usize << prm.scale;
                pages((nv + 1) * 4) + pages(32 * nv * 4) + pages(nv * 4) + pages(prm.black_list * 8)
            }
            Workload::Locks => PAGE + prm.lock_stripes.clamp(1, LOCK_STRIPES_MAX) * PAGE,
        }
}

/// Runs `w` once in `mode` on `procs` processes (pinned round-robin to
/// `cpus`). `valid` reflects the workload's own checks only; the caller
/// compares the checksum with the single-process run.
pub fn run_one(
    w: Workload,
    mode: BenchMode,
    procs: usize,
    prm: &SvmBenchParams,
    cpus: &[usize],
    rep: usize,
) -> Result<SvmRun, String> {
    let mut cfg = SvmConfig::new(heap_bytes(w, prm, procs), procs);
    cfg.flavour = mode.flavour();
    cfg.cpus = cpus.to_vec();
    let svm = Svm::new(cfg).map_err(|e| e.to_string())?;
    svm.run(|p| match w {
        Workload::Bucket => bucket(p, prm, mode),
        Workload::Malstone => malstone(p, prm, mode),
        Workload::Bfs => bfs(p, prm, mode),
        Workload::Locks => locks(p, prm, mode),
    })
    .map_err(|e| format!("{} {} x{procs}: {e}", w.name(), mode.name()))?;
    let sc = svm.scratch();
    let phases: Vec<(String, f64)> = phase_names(w)
        .iter()
        .enumerate()
        .map(|(k, n)| (n.to_string(), sc[S_PHASE + k].load(Relaxed) as f64 / 1e9))
        .collect();
    Ok(SvmRun {
        workload: w,
        mode,
        procs,
        nodes: 1,
        rep,
        seconds: phases.iter().map(|x| x.1).sum(),
        phases,
        checksum: sc[S_SUM].load(Relaxed),
        valid: sc[S_ERR].load(Relaxed) == 0,
        stats: svm.total_stats(),
    })
}

/// A comparison of two modes at one process count (median times).
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// Workload.
    pub workload: Workload,
    /// Processes.
    pub procs: usize,
    /// `numerator / denominator` of times.
    pub what: String,
    /// The ratio.
    pub ratio: f64,
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct SvmBench {
    /// "svm".
    pub benchmark: &'static str,
    /// The machine.
    pub machine: Machine,
    /// The command.
    pub command: String,
    /// Sizes.
    pub params: SvmBenchParams,
    /// CPUs processes were pinned to (round-robin).
    pub cpus: Vec<usize>,
    /// Every run.
    pub runs: Vec<SvmRun>,
    /// Mode comparisons.
    pub ratios: Vec<Ratio>,
}

impl SvmBench {
    fn median(&self, w: Workload, m: BenchMode, procs: usize) -> Option<f64> {
        let mut v: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.workload == w && r.mode == m && r.procs == procs)
            .map(|r| r.seconds)
            .collect();
        (!v.is_empty()).then(|| crate::report::quantile(&mut v, 0.5))
    }
}

/// Runs every workload x mode x process count `reps` times, interleaved,
/// after a single-process `spm-coherent` reference run per workload.
pub fn bench(
    workloads: &[Workload],
    modes: &[BenchMode],
    procs: &[usize],
    reps: usize,
    prm: &SvmBenchParams,
    cpus: &[usize],
    mut progress: impl FnMut(&SvmRun),
) -> Result<SvmBench, String> {
    let mut reference = Vec::new();
    for &w in workloads {
        let r = run_one(w, BenchMode::SpmCoherent, 1, prm, cpus, 0)?;
        reference.push((w, r.checksum));
    }
    let mut runs = Vec::new();
    for rep in 0..reps.max(1) {
        for &n in procs {
            for &w in workloads {
                for &m in modes {
                    let mut r = run_one(w, m, n, prm, cpus, rep)?;
                    let want = reference.iter().find(|x| x.0 == w).map(|x| x.1);
                    r.valid &= want == Some(r.checksum);
                    progress(&r);
                    runs.push(r);
                }
            }
        }
    }
    let mut b = SvmBench {
        benchmark: "svm",
        machine: Machine::collect(),
        command: command_line(),
        params: prm.clone(),
        cpus: cpus.to_vec(),
        runs,
        ratios: Vec::new(),
    };
    let pairs = [
        (BenchMode::Hybrid, BenchMode::SpmCoherent),
        (BenchMode::SpmNoncoherent, BenchMode::Hybrid),
        (BenchMode::SpmNoncoherent, BenchMode::HybridNoncoherent),
        (BenchMode::SpmNoncoherent, BenchMode::SpmCoherent),
    ];
    for &w in workloads {
        for &n in procs {
            for (a, c) in pairs {
                if let (Some(x), Some(y)) = (b.median(w, a, n), b.median(w, c, n)) {
                    b.ratios.push(Ratio {
                        workload: w,
                        procs: n,
                        what: format!("{} / {}", a.name(), c.name()),
                        ratio: x / y,
                    });
                }
            }
        }
    }
    Ok(b)
}

/// The results as tables: runs (median per configuration) and ratios.
pub fn render(b: &SvmBench) -> String {
    let mut t = Table::new(&[
        "workload",
        "mode",
        "procs",
        "time s",
        "speedup",
        "faults",
        "twins",
        "diffs",
        "diff KiB",
        "notices",
        "invalid.",
        "lines flushed",
        "lines inval.",
        "valid",
    ]);
    let mut seen = Vec::new();
    for r in &b.runs {
        let key = (r.workload, r.mode, r.procs);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let med = b.median(r.workload, r.mode, r.procs).unwrap_or(r.seconds);
        let one = b.median(r.workload, r.mode, 1);
        let all_valid = b
            .runs
            .iter()
            .filter(|x| (x.workload, x.mode, x.procs) == key)
            .all(|x| x.valid);
        let s = &r.stats;
        t.row(vec![
            r.workload.name().into(),
            r.mode.name().into(),
            r.procs.to_string(),
            format!("{med:.3}"),
            one.map_or("-".into(), |o| format!("{:.2}", o / med)),
            r.faults().to_string(),
            s.twins.to_string(),
            s.diffs.to_string(),
            format!("{:.0}", s.diff_bytes as f64 / 1024.0),
            s.notices_sent.to_string(),
            s.invalidations.to_string(),
            s.lines_flushed.to_string(),
            s.lines_invalidated.to_string(),
            if all_valid { "yes".into() } else { "NO".into() },
        ]);
    }
    let mut out = t.render();
    let mut q = Table::new(&["workload", "procs", "ratio of times", "value"]);
    for r in &b.ratios {
        q.row(vec![
            r.workload.name().into(),
            r.procs.to_string(),
            r.what.clone(),
            format!("{:.3}", r.ratio),
        ]);
    }
    out.push('\n');
    out.push_str(&q.render());
    out
}

/// Bars of the median time per (workload, processes), one per mode.
pub fn plot(b: &SvmBench, path: &std::path::Path) -> Result<(), String> {
    let samples: Vec<(String, String, f64)> = b
        .runs
        .iter()
        .map(|r| {
            (
                format!("{} x{}", r.workload.name(), r.procs),
                r.mode.name().to_string(),
                r.seconds,
            )
        })
        .collect();
    crate::plot::grouped_bars(
        path,
        "SVM workloads: time by page-mode policy (lower is better)",
        "seconds",
        &crate::plot::median_bars(&samples),
        false,
    )
}

// ------------------------------------------------------------ MPI jobs

/// One run inside an MPI job (collective: every rank calls it with the
/// same arguments); rank 0 gets the run (statistics of all ranks, checksum
/// of all ranks), the others `None`. `valid` reflects the workload's own
/// checks; the comparison ([`compare`]) checks the checksum against the
/// one-rank run.
pub fn run_one_mpi(
    w: Workload,
    mode: BenchMode,
    prm: &SvmBenchParams,
    rep: usize,
) -> Result<Option<SvmRun>, String> {
    let ranks = tiermem::svm::mpi_ranks().map_err(|e| e.to_string())?;
    let mut cfg = SvmConfig::new(heap_bytes(w, prm, ranks), 0);
    cfg.flavour = mode.flavour();
    cfg.transport = tiermem::svm::SvmTransport::Mpi;
    let svm = Svm::new(cfg).map_err(|e| format!("{} {}: {e}", w.name(), mode.name()))?;
    svm.run(|p| match w {
        Workload::Bucket => bucket(p, prm, mode),
        Workload::Malstone => malstone(p, prm, mode),
        Workload::Bfs => bfs(p, prm, mode),
        Workload::Locks => locks(p, prm, mode),
    })
    .map_err(|e| format!("{} {} x{ranks}: {e}", w.name(), mode.name()))?;
    if svm.mpi_rank() != Some(0) {
        return Ok(None);
    }
    let sc = svm.scratch();
    let phases: Vec<(String, f64)> = phase_names(w)
        .iter()
        .enumerate()
        .map(|(k, n)| (n.to_string(), sc[S_PHASE + k].load(Relaxed) as f64 / 1e9))
        .collect();
    Ok(Some(SvmRun {
        workload: w,
        mode,
        procs: ranks,
        nodes: svm.nodes(),
        rep,
        seconds: phases.iter().map(|x| x.1).sum(),
        phases,
        checksum: sc[S_SUM].load(Relaxed),
        valid: sc[S_ERR].load(Relaxed) == 0,
        stats: svm.total_stats(),
    }))
}

fn phase_names(w: Workload) -> &'static [&'static str] {
    match w {
        Workload::Bucket => &["generate", "bucket", "sort", "merge"],
        Workload::Malstone => &["generate", "count", "reduce"],
        Workload::Bfs => &["bfs"],
        Workload::Locks => &["update", "reduce"],
    }
}

/// One line of the MPI comparison (`--records` files, JSON lines): what
/// tiermem's and ArgoDSM's benchmarks both write.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Record {
    /// "tiermem" or "argodsm" (or a variant such as "argodsm-ft").
    pub system: String,
    /// Workload name.
    pub workload: String,
    /// Mode (tiermem's mode names; ArgoDSM: "argo").
    pub mode: String,
    /// MPI ranks.
    pub ranks: usize,
    /// Nodes.
    pub nodes: usize,
    /// Repetition.
    pub rep: usize,
    /// Time of the measured part, seconds.
    pub seconds: f64,
    /// Phases of the measured part.
    pub phases: Vec<(String, f64)>,
    /// Checksum of the result.
    pub checksum: u64,
    /// The workload's own checks passed.
    pub valid: bool,
    /// Protocol counters, all ranks, whole run (names as each system has
    /// them; `fetch_pages`, `bytes_in`, `bytes_out`, `lock_ms`,
    /// `barrier_ms` where both have them).
    pub breakdown: std::collections::BTreeMap<String, f64>,
}

impl Record {
    /// The record of a tiermem run.
    pub fn of(r: &SvmRun) -> Record {
        let s = &r.stats;
        let mut b = std::collections::BTreeMap::new();
        for (k, v) in [
            ("fetch_pages", s.fetches),
            ("net_fetch_pages", s.net_fetch_pages),
            ("diffs", s.diffs),
            ("diff_bytes", s.diff_bytes),
            ("notices", s.notices_sent),
            ("invalidations", s.invalidations),
            ("bytes_in", s.net_bytes_in),
            ("bytes_out", s.net_bytes_out),
            ("net_ops", s.net_ops),
            ("net_flushes", s.net_flushes),
            ("locks", s.locks),
        ] {
            b.insert(k.to_string(), v as f64);
        }
        b.insert("lock_ms".into(), s.lock_ns as f64 / 1e6);
        b.insert("barrier_ms".into(), s.barrier_ns as f64 / 1e6);
        Record {
            system: "tiermem".into(),
            workload: r.workload.name().into(),
            mode: r.mode.name().into(),
            ranks: r.procs,
            nodes: r.nodes,
            rep: r.rep,
            seconds: r.seconds,
            phases: r.phases.clone(),
            checksum: r.checksum,
            valid: r.valid,
            breakdown: b,
        }
    }
}

/// The comparison of records from several MPI jobs.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// "svm-mpi".
    pub benchmark: &'static str,
    /// The machine.
    pub machine: Machine,
    /// The command.
    pub command: String,
    /// Every record, with `valid` also requiring the one-rank checksum.
    pub records: Vec<Record>,
    /// Rows: median seconds per (workload, ranks, nodes) and system/mode.
    pub rows: Vec<CompareRow>,
}

/// Median times of one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct CompareRow {
    /// Workload.
    pub workload: String,
    /// Ranks.
    pub ranks: usize,
    /// Nodes.
    pub nodes: usize,
    /// (system/mode, median seconds, runs, all valid).
    pub times: Vec<(String, f64, usize, bool)>,
    /// Fastest tiermem mode over fastest ArgoDSM variant (below 1: tiermem faster).
    pub tiermem_over_argo: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    crate::report::quantile(&mut v, 0.5)
}

/// Compares records: verifies every checksum against the one-rank run of
/// its workload (any system), and takes medians.
pub fn compare(mut records: Vec<Record>) -> Result<Comparison, String> {
    let mut reference: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for r in records.iter().filter(|r| r.ranks == 1 && r.system == "tiermem") {
        reference.entry(r.workload.clone()).or_insert(r.checksum);
    }
    for r in records.iter().filter(|r| r.ranks == 1) {
        reference.entry(r.workload.clone()).or_insert(r.checksum);
    }
    for r in &mut records {
        let want = reference.get(&r.workload);
        r.valid &= want == Some(&r.checksum);
    }
    let mut keys: Vec<(String, usize, usize)> = records
        .iter()
        .map(|r| (r.workload.clone(), r.ranks, r.nodes))
        .collect();
    keys.sort_by(|a, b| {
        let order = |w: &str| {
            ["bucket", "malstone", "bfs", "locks"]
                .iter()
                .position(|x| *x == w)
                .unwrap_or(9)
        };
        (order(&a.0), a.2, a.1).cmp(&(order(&b.0), b.2, b.1))
    });
    keys.dedup();
    let mut rows = Vec::new();
    for (w, ranks, nodes) in keys {
        let of: Vec<&Record> = records
            .iter()
            .filter(|r| r.workload == w && r.ranks == ranks && r.nodes == nodes)
            .collect();
        let mut series: Vec<String> = of.iter().map(|r| format!("{}/{}", r.system, r.mode)).collect();
        series.dedup();
        let mut seen = Vec::new();
        let mut times = Vec::new();
        for sname in series {
            if seen.contains(&sname) {
                continue;
            }
            seen.push(sname.clone());
            let runs: Vec<&&Record> = of
                .iter()
                .filter(|r| format!("{}/{}", r.system, r.mode) == sname)
                .collect();
            times.push((
                sname,
                median(runs.iter().map(|r| r.seconds).collect()),
                runs.len(),
                runs.iter().all(|r| r.valid),
            ));
        }
        let best = |pre: &str| {
            times
                .iter()
                .filter(|t| t.0.starts_with(pre))
                .map(|t| t.1)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
        };
        let ratio = match (best("tiermem/"), best("argodsm")) {
            (Some(t), Some(a)) => Some(t / a),
            _ => None,
        };
        rows.push(CompareRow {
            workload: w,
            ranks,
            nodes,
            times,
            tiermem_over_argo: ratio,
        });
    }
    Ok(Comparison {
        benchmark: "svm-mpi",
        machine: Machine::collect(),
        command: command_line(),
        records,
        rows,
    })
}

/// The comparison as tables: medians per configuration, then the
/// breakdown per system (medians of the counters).
pub fn render_comparison(c: &Comparison) -> String {
    let mut series: Vec<String> = Vec::new();
    for r in &c.rows {
        for t in &r.times {
            if !series.contains(&t.0) {
                series.push(t.0.clone());
            }
        }
    }
    let mut head: Vec<&str> = vec!["workload", "nodes", "ranks"];
    head.extend(series.iter().map(String::as_str));
    head.push("best tiermem / best argodsm");
    head.push("valid");
    let mut t = Table::new(&head);
    for r in &c.rows {
        let mut row = vec![r.workload.clone(), r.nodes.to_string(), r.ranks.to_string()];
        for sname in &series {
            row.push(
                r.times
                    .iter()
                    .find(|x| &x.0 == sname)
                    .map_or("-".into(), |x| format!("{:.3}", x.1)),
            );
        }
        row.push(r.tiermem_over_argo.map_or("-".into(), |x| format!("{x:.2}")));
        row.push(if r.times.iter().all(|x| x.3) {
            "yes".into()
        } else {
            "NO".into()
        });
        t.row(row);
    }
    let mut out = t.render();
    // The MPI transport against LocalShm (the forked team), same modes.
    let mut l = Table::new(&[
        "workload",
        "ranks",
        "mode",
        "MPI s",
        "LocalShm s",
        "MPI / LocalShm",
    ]);
    let mut pairs = 0;
    for r in c.rows.iter().filter(|r| r.nodes == 1) {
        for (sname, secs, _, _) in &r.times {
            let Some(mode) = sname.strip_prefix("tiermem/") else {
                continue;
            };
            if let Some(local) = r.times.iter().find(|x| x.0 == format!("tiermem-local/{mode}")) {
                l.row(vec![
                    r.workload.clone(),
                    r.ranks.to_string(),
                    mode.to_string(),
                    format!("{secs:.3}"),
                    format!("{:.3}", local.1),
                    format!("{:.2}", secs / local.1),
                ]);
                pairs += 1;
            }
        }
    }
    if pairs > 0 {
        out.push('\n');
        out.push_str(&l.render());
    }
    let keys = [
        "fetch_pages",
        "net_fetch_pages",
        "diffs",
        "bytes_in",
        "bytes_out",
        "net_flushes",
        "lock_ms",
        "barrier_ms",
    ];
    let mut head: Vec<&str> = vec!["workload", "nodes", "ranks", "system/mode", "time s"];
    head.extend(keys);
    let mut b = Table::new(&head);
    for r in &c.rows {
        for (sname, secs, _, _) in &r.times {
            let recs: Vec<&Record> = c
                .records
                .iter()
                .filter(|x| {
                    x.workload == r.workload
                        && x.ranks == r.ranks
                        && x.nodes == r.nodes
                        && &format!("{}/{}", x.system, x.mode) == sname
                })
                .collect();
            let mut row = vec![
                r.workload.clone(),
                r.nodes.to_string(),
                r.ranks.to_string(),
                sname.clone(),
                format!("{secs:.3}"),
            ];
            for k in keys {
                let v: Vec<f64> = recs.iter().filter_map(|x| x.breakdown.get(k).copied()).collect();
                row.push(if v.is_empty() {
                    "-".into()
                } else if k.ends_with("_ms") {
                    format!("{:.1}", median(v))
                } else if k.starts_with("bytes") {
                    format!("{:.1}M", median(v) / 1e6)
                } else {
                    format!("{:.0}", median(v))
                });
            }
            b.row(row);
        }
    }
    out.push('\n');
    out.push_str(&b.render());
    out
}

/// Bars of the median time per (workload, nodes, ranks), one per
/// system/mode.
pub fn plot_comparison(c: &Comparison, path: &std::path::Path) -> Result<(), String> {
    let samples: Vec<(String, String, f64)> = c
        .records
        .iter()
        .map(|r| {
            (
                format!("{} {}n x{}", r.workload, r.nodes, r.ranks),
                format!("{}/{}", r.system, r.mode),
                r.seconds,
            )
        })
        .collect();
    crate::plot::grouped_bars(
        path,
        "SVM over MPI: tiermem and ArgoDSM (lower is better)",
        "seconds",
        &crate::plot::median_bars(&samples),
        true,
    )
}

/// Writes the Graph500 graph of the BFS workload (scale `scale`) for
/// ArgoDSM's benchmark: little-endian u64 vertex count, u64 adjacency
/// length, then the offsets (u32, vertices + 1) and the adjacency (u32).
pub fn export_graph(scale: u32, path: &std::path::Path) -> Result<(), String> {
    let nv = 1usize << scale;
    let ne = 16 * nv;
    let mut edges = vec![[0u32; 2]; ne];
    crate::graph500::generate_edges(scale, GRAPH_SEED, &mut edges, 1);
    let mut offsets = vec![0u64; nv + 1];
    let mut adjacency = vec![0u32; 2 * ne];
    let used = crate::graph500::build_csr(&edges, &mut offsets, &mut adjacency);
    let mut out = Vec::with_capacity(16 + 4 * (nv + 1 + used));
    out.extend_from_slice(&(nv as u64).to_le_bytes());
    out.extend_from_slice(&(used as u64).to_le_bytes());
    for &o in &offsets {
        out.extend_from_slice(&(o as u32).to_le_bytes());
    }
    for &a in &adjacency[..used] {
        out.extend_from_slice(&a.to_le_bytes());
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock workload on a forked team: every mode at 2 and 3 processes
    /// gives the one-process checksum, passes its checks and takes locks.
    #[test]
    fn lock_workload_matches_one_process() {
        let prm = SvmBenchParams {
            lock_items: 40_000,
            lock_task: 1000,
            lock_stripes: 4,
            ..SvmBenchParams::default()
        };
        let cpus: Vec<usize> = (0..tiermem_sys::thread::online_cpus()).collect();
        let one = run_one(Workload::Locks, BenchMode::SpmCoherent, 1, &prm, &cpus, 0).unwrap();
        assert!(one.valid);
        for procs in [2, 3] {
            for mode in [
                BenchMode::SpmCoherent,
                BenchMode::SpmNoncoherent,
                BenchMode::Hybrid,
                BenchMode::Dsm,
            ] {
                let r = run_one(Workload::Locks, mode, procs, &prm, &cpus, 0).unwrap();
                assert!(r.valid, "{} x{procs}: checks failed", mode.name());
                assert_eq!(r.checksum, one.checksum, "{} x{procs}", mode.name());
                // 40 tasks + the final empty take per process, 4 locks a task.
                assert_eq!(r.stats.locks, 40 * 5 + procs as u64, "{} x{procs}", mode.name());
            }
        }
    }
}
