//! The three workloads' bodies, run by every process of a team or job:
//! bucket sort, Malstone and the BFS.

use super::*;

// Scratch words: 0 checksum (summed), 1 errors, 2.. phase ns (rank 0).
// In an MPI job every rank has its own words, summed after the run.
pub(super) const S_SUM: usize = 0;
pub(super) const S_ERR: usize = 1;
pub(super) const S_PHASE: usize = 2;

pub(super) fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// `[lo, hi)` of `n` items for `rank` of `procs`.
pub(super) fn share(n: usize, rank: usize, procs: usize) -> (usize, usize) {
    (n * rank / procs, n * (rank + 1) / procs)
}

pub(super) fn pages(bytes: usize) -> usize {
    bytes.div_ceil(PAGE) * PAGE
}

/// Rank 0's clock for phases between barriers.
pub(super) struct Phases<'a> {
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

pub(super) fn fail(p: &SvmProc<'_>) {
    p.scratch()[S_ERR].fetch_add(1, Relaxed);
}

/// Collective allocation; every process puts the pages in DSM in mode
/// `dsm` (with more than one process).
pub(super) fn alloc(p: &SvmProc<'_>, size: usize, mode: BenchMode) -> Result<usize, Error> {
    let a = p.malloc(size)?;
    if mode == BenchMode::Dsm && p.procs() > 1 {
        p.set_mode(a, pages(size), SvmMode::Dsm)?;
    }
    Ok(a)
}

/// In-place insertion sort of shared words (the paper uses bubble sort;
/// both are quadratic with heavy reuse of the bucket).
pub(super) fn insertion_sort(a: &[AtomicU32]) {
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
pub(super) fn bucket(p: &SvmProc<'_>, prm: &SvmBenchParams, mode: BenchMode) -> Result<(), Error> {
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
pub(super) fn malstone(p: &SvmProc<'_>, prm: &SvmBenchParams, mode: BenchMode) -> Result<(), Error> {
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
        let bad = mix(visitor).is_multiple_of(8) as u64;
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

pub(super) const INF: u32 = u32::MAX;
/// Seed of the Graph500 generator (the same graph for every mode and
/// process count).
pub(super) const GRAPH_SEED: u64 = 0x5356_4d00;

/// Graph500-style BFS with a black list (paper IV.C). The graph is built
/// by rank 0 (not timed); the timed part is the BFS kernel over `roots`
/// roots. Level-synchronous bottom-up: each process finds parents for its
/// own unvisited vertices, so every page of the level array has one
/// writer; a discovered vertex's neighbours are looked up in the black
/// list (binary search; read-only private in hybrid, as in the paper).
pub(super) fn bfs(p: &SvmProc<'_>, prm: &SvmBenchParams, mode: BenchMode) -> Result<(), Error> {
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
pub(super) fn locks(p: &SvmProc<'_>, prm: &SvmBenchParams, mode: BenchMode) -> Result<(), Error> {
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
