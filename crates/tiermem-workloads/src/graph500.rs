//! Graph500 breadth-first search (specification 3.0, kernels 1 and 2).
//!
//! - [`generate_edges`]: the Kronecker generator (A = 0.57, B = C = 0.19,
//!   D = 0.05), vertex labels permuted and the edge list shuffled, all from
//!   one seed (the same edges at every thread count);
//! - [`build_csr`]: kernel 1, the undirected graph in compressed sparse rows
//!   (both directions of each edge, self-loops dropped, duplicates kept);
//! - [`sample_roots`]: up to 64 distinct search keys of degree >= 1;
//! - [`bfs`]: kernel 2, a level-synchronous top-down BFS; with several
//!   threads each claims a vertex by compare-and-swap of its parent;
//! - [`validate`]: the specification's five rules, and the number of input
//!   edges in the searched component (the TEPS numerator);
//! - [`run`]: the benchmark over one [`Memory`]: every big array (edge list,
//!   CSR, parents, queue) lives in it.
//!
//! Everything works on plain slices, so other BFS implementations can reuse
//! the generator, the CSR builder and the validator.

use crate::memory::{arena_bytes, pinned_team, Arena, Memory, MemoryError};
use crate::rng::Rng;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;
use thiserror::Error;

/// Parent of an unreached vertex.
pub const NONE: u64 = u64::MAX;
/// Level of an unreached vertex.
pub const UNREACHED: u32 = u32::MAX;
/// Search keys per graph (specification).
pub const SEARCH_KEYS: usize = 64;

/// Kronecker initiator probabilities.
const A: f64 = 0.57;
const B: f64 = 0.19;
const C: f64 = 0.19;

/// Number of vertices of a graph of `scale`.
pub fn vertices(scale: u32) -> usize {
    1usize << scale
}

/// Number of input edges of a graph of `scale` and `edgefactor`.
pub fn edge_count(scale: u32, edgefactor: u32) -> usize {
    (edgefactor as usize) << scale
}

/// Fills `edges` (length `edge_count(scale, ef)`) with the Kronecker graph of
/// `scale` for `seed`, using `threads` threads for the Kronecker part; then
/// permutes the vertex labels and shuffles the edge list (sequentially).
pub fn generate_edges(scale: u32, seed: u64, edges: &mut [[u32; 2]], threads: usize) {
    assert!((1..=31).contains(&scale), "SCALE must be in 1..=31");
    let ab = A + B;
    let c_norm = C / (1.0 - ab);
    let a_norm = A / ab;
    let chunk = edges.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        for (k, part) in edges.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                for (i, e) in part.iter_mut().enumerate() {
                    let mut r = Rng::for_item(seed, (k * chunk + i) as u64);
                    let (mut u, mut v) = (0u32, 0u32);
                    for ib in 0..scale {
                        let ii = r.unit() > ab;
                        let jj = r.unit() > if ii { c_norm } else { a_norm };
                        u |= (ii as u32) << ib;
                        v |= (jj as u32) << ib;
                    }
                    *e = [u, v];
                }
            });
        }
    });
    let mut rng = Rng::new(seed ^ 0x7065_726d);
    let n = vertices(scale);
    let mut perm: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        perm.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for e in edges.iter_mut() {
        *e = [perm[e[0] as usize], perm[e[1] as usize]];
    }
    for i in (1..edges.len()).rev() {
        edges.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// A graph in compressed sparse rows: the neighbours of `v` are
/// `adj[offsets[v]..offsets[v + 1]]`.
#[derive(Clone, Copy, Debug)]
pub struct Csr<'a> {
    /// `n + 1` row starts.
    pub offsets: &'a [u64],
    /// Neighbours.
    pub adj: &'a [u32],
}

impl Csr<'_> {
    /// Vertices.
    pub fn n(&self) -> usize {
        self.offsets.len() - 1
    }
    /// Degree of `v`.
    pub fn degree(&self, v: usize) -> u64 {
        self.offsets[v + 1] - self.offsets[v]
    }
    /// Neighbours of `v`.
    pub fn neighbours(&self, v: usize) -> &[u32] {
        &self.adj[self.offsets[v] as usize..self.offsets[v + 1] as usize]
    }
}

/// Kernel 1: builds the undirected CSR of `edges` over `offsets.len() - 1`
/// vertices into `offsets` and `adj` (which needs `2 * edges.len()` room);
/// self-loops are dropped. Returns the adjacency entries used.
pub fn build_csr(edges: &[[u32; 2]], offsets: &mut [u64], adj: &mut [u32]) -> usize {
    let n = offsets.len() - 1;
    offsets.fill(0);
    for &[u, v] in edges {
        if u != v {
            offsets[u as usize] += 1;
            offsets[v as usize] += 1;
        }
    }
    // Exclusive prefix sum: offsets[v] = start of v.
    let mut sum = 0;
    for o in offsets[..n].iter_mut() {
        let d = *o;
        *o = sum;
        sum += d;
    }
    // Fill with offsets[v] as v's cursor; afterwards it holds v's end.
    for &[u, v] in edges {
        if u != v {
            adj[offsets[u as usize] as usize] = v;
            offsets[u as usize] += 1;
            adj[offsets[v as usize] as usize] = u;
            offsets[v as usize] += 1;
        }
    }
    offsets.copy_within(0..n, 1);
    offsets[0] = 0;
    offsets[n] = sum;
    sum as usize
}

/// Up to [`SEARCH_KEYS`] distinct random vertices of degree >= 1 (all of
/// them when there are fewer).
pub fn sample_roots(g: &Csr<'_>, seed: u64, count: usize) -> Vec<u32> {
    let candidates: Vec<u32> = (0..g.n() as u32).filter(|&v| g.degree(v as usize) > 0).collect();
    if candidates.len() <= count {
        return candidates;
    }
    let mut rng = Rng::new(seed ^ 0x726f_6f74);
    let mut roots = Vec::with_capacity(count);
    while roots.len() < count {
        let v = candidates[rng.below(candidates.len() as u64) as usize];
        if !roots.contains(&v) {
            roots.push(v);
        }
    }
    roots
}

/// Kernel 2: a level-synchronous top-down BFS from `root` by `threads`
/// threads (pinned to CPUs 0, 1, ...). `parent` (n words) receives the tree,
/// [`NONE`] for unreached vertices; `queue` (n words) is the frontier log.
/// Initializing `parent` is part of the search, as in the reference code.
/// Returns the CPUs the threads ran on.
pub fn bfs(
    g: &Csr<'_>,
    root: u32,
    parent: &[AtomicU64],
    queue: &[AtomicU64],
    threads: usize,
) -> Vec<Option<usize>> {
    const GRAIN: u64 = 64;
    let n = g.n();
    let threads = threads.max(1);
    let lo = AtomicU64::new(0);
    let hi = AtomicU64::new(1);
    let tail = AtomicU64::new(1);
    let cursor = AtomicU64::new(0);
    let barrier = Barrier::new(threads);
    pinned_team(threads, |t| {
        let part = n.div_ceil(threads);
        for p in parent.iter().skip(t * part).take(part) {
            p.store(NONE, Ordering::Relaxed);
        }
        barrier.wait();
        if t == 0 {
            parent[root as usize].store(root as u64, Ordering::Relaxed);
            queue[0].store(root as u64, Ordering::Relaxed);
        }
        barrier.wait();
        let mut local: Vec<u64> = Vec::with_capacity(1024);
        let flush = |local: &mut Vec<u64>| {
            let at = tail.fetch_add(local.len() as u64, Ordering::Relaxed) as usize;
            for (q, &v) in queue[at..at + local.len()].iter().zip(local.iter()) {
                q.store(v, Ordering::Relaxed);
            }
            local.clear();
        };
        loop {
            let (l, h) = (lo.load(Ordering::Relaxed), hi.load(Ordering::Relaxed));
            if l == h {
                break;
            }
            loop {
                let start = l + cursor.fetch_add(GRAIN, Ordering::Relaxed);
                if start >= h {
                    break;
                }
                for q in &queue[start as usize..(start + GRAIN).min(h) as usize] {
                    let u = q.load(Ordering::Relaxed);
                    for &v in g.neighbours(u as usize) {
                        let p = &parent[v as usize];
                        if p.load(Ordering::Relaxed) != NONE {
                            continue;
                        }
                        let claimed = if threads == 1 {
                            p.store(u, Ordering::Relaxed);
                            true
                        } else {
                            p.compare_exchange(NONE, u, Ordering::Relaxed, Ordering::Relaxed)
                                .is_ok()
                        };
                        if claimed {
                            local.push(v as u64);
                            if local.len() == local.capacity() {
                                flush(&mut local);
                            }
                        }
                    }
                }
            }
            flush(&mut local);
            barrier.wait();
            if t == 0 {
                lo.store(h, Ordering::Relaxed);
                hi.store(tail.load(Ordering::Relaxed), Ordering::Relaxed);
                cursor.store(0, Ordering::Relaxed);
            }
            barrier.wait();
        }
    })
    .into_iter()
    .map(|((), cpu)| cpu)
    .collect()
}

/// A broken rule of the specification's validation.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Violation {
    /// Rule 1: the parents do not form a tree rooted at the root (a cycle, a
    /// chain ending at an unreached vertex, a parent out of range, or a root
    /// that is not its own parent).
    #[error("rule 1: parents of vertex {vertex} do not lead to the root without a cycle")]
    NotATree {
        /// Where the walk started.
        vertex: u64,
    },
    /// Rule 2: a tree edge whose endpoints' levels do not differ by one.
    #[error("rule 2: tree edge {vertex} -> parent {parent} joins levels {level} and {parent_level}")]
    TreeEdgeLevel {
        /// The child.
        vertex: u64,
        /// Its parent.
        parent: u64,
        /// The child's level.
        level: u32,
        /// The parent's level.
        parent_level: u32,
    },
    /// Rule 3: an input edge whose endpoints' levels differ by more than one
    /// (or one endpoint reached and the other not).
    #[error("rule 3: input edge ({u}, {v}) joins levels {lu} and {lv}")]
    EdgeLevelGap {
        /// One endpoint.
        u: u32,
        /// The other.
        v: u32,
        /// Level of `u`.
        lu: u32,
        /// Level of `v`.
        lv: u32,
    },
    /// Rule 4: the tree does not span exactly the root's component.
    #[error("rule 4: vertex {vertex} is {} the tree but {} the root's component",
        if *.reached { "in" } else { "not in" }, if *.reached { "not in" } else { "in" })]
    Span {
        /// The vertex.
        vertex: u64,
        /// Whether the tree reaches it.
        reached: bool,
    },
    /// Rule 5: a vertex and its parent are not joined by an input edge.
    #[error("rule 5: vertex {vertex} and its parent {parent} share no input edge")]
    NotAnEdge {
        /// The child.
        vertex: u64,
        /// Its parent.
        parent: u64,
    },
}

/// Rule 1: the level (depth) of every vertex in the tree by walking parent
/// chains; [`UNREACHED`] where the parent is [`NONE`].
pub fn tree_levels(root: u32, parent: &[u64]) -> Result<Vec<u32>, Violation> {
    const VISITING: u32 = UNREACHED - 1;
    let n = parent.len();
    let mut level = vec![UNREACHED; n];
    if parent.get(root as usize) != Some(&(root as u64)) {
        return Err(Violation::NotATree { vertex: root as u64 });
    }
    level[root as usize] = 0;
    let mut path = Vec::new();
    for start in 0..n {
        if parent[start] == NONE || level[start] != UNREACHED {
            continue;
        }
        let bad = Violation::NotATree { vertex: start as u64 };
        let mut v = start;
        path.clear();
        while level[v] == UNREACHED {
            let p = parent[v];
            if p == NONE || p as usize >= n || p as usize == v {
                return Err(bad);
            }
            level[v] = VISITING;
            path.push(v);
            v = p as usize;
        }
        if level[v] == VISITING {
            return Err(bad);
        }
        let mut l = level[v];
        for &w in path.iter().rev() {
            l += 1;
            level[w] = l;
        }
    }
    Ok(level)
}

/// Rule 2: every tree edge joins levels that differ by exactly one. With
/// levels from [`tree_levels`] this holds by construction; it guards levels
/// computed any other way.
pub fn check_tree_edge_levels(root: u32, parent: &[u64], level: &[u32]) -> Result<(), Violation> {
    for (v, &p) in parent.iter().enumerate() {
        if p == NONE || v == root as usize {
            continue;
        }
        let (lv, lp) = (level[v], level[p as usize]);
        if lp == UNREACHED || lv != lp + 1 {
            return Err(Violation::TreeEdgeLevel {
                vertex: v as u64,
                parent: p,
                level: lv,
                parent_level: lp,
            });
        }
    }
    Ok(())
}

/// Connected-component labels of the input graph (union-find over the edge
/// list, independent of the CSR), for rule 4.
pub fn components(n: usize, edges: &[[u32; 2]]) -> Vec<u32> {
    let mut up: Vec<u32> = (0..n as u32).collect();
    fn find(up: &mut [u32], mut x: u32) -> u32 {
        while up[x as usize] != x {
            let g = up[up[x as usize] as usize];
            up[x as usize] = g;
            x = g;
        }
        x
    }
    for &[u, v] in edges {
        let (a, b) = (find(&mut up, u), find(&mut up, v));
        if a != b {
            up[a.max(b) as usize] = a.min(b);
        }
    }
    (0..n as u32).map(|v| find(&mut up, v)).collect()
}

/// Rule 4: the tree reaches exactly the vertices of the root's component.
pub fn check_span(root: u32, parent: &[u64], component: &[u32]) -> Result<(), Violation> {
    let c = component[root as usize];
    for (v, &p) in parent.iter().enumerate() {
        let reached = p != NONE;
        if reached != (component[v] == c) {
            return Err(Violation::Span {
                vertex: v as u64,
                reached,
            });
        }
    }
    Ok(())
}

/// Rules 3 and 5 in one pass over the input edges; returns the number of
/// input edges (tuples, duplicates and self-loops included) with both
/// endpoints in the tree: the edges the search traversed, for TEPS.
pub fn check_edges(root: u32, parent: &[u64], level: &[u32], edges: &[[u32; 2]]) -> Result<u64, Violation> {
    let mut joined = vec![false; parent.len()];
    joined[root as usize] = true;
    let mut nedge = 0;
    let mut gap = None;
    for &[u, v] in edges {
        let (lu, lv) = (level[u as usize], level[v as usize]);
        if lu == UNREACHED && lv == UNREACHED {
            continue;
        }
        if lu == UNREACHED || lv == UNREACHED || lu.abs_diff(lv) > 1 {
            gap.get_or_insert(Violation::EdgeLevelGap { u, v, lu, lv });
            continue;
        }
        nedge += 1;
        if parent[u as usize] == v as u64 {
            joined[u as usize] = true;
        }
        if parent[v as usize] == u as u64 {
            joined[v as usize] = true;
        }
    }
    if let Some((v, _)) = joined.iter().enumerate().find(|&(v, &j)| !j && parent[v] != NONE) {
        return Err(Violation::NotAnEdge {
            vertex: v as u64,
            parent: parent[v],
        });
    }
    gap.map_or(Ok(nedge), Err)
}

/// All five rules for the search from `root`; `component` from
/// [`components`]. Returns the traversed input edges (TEPS numerator).
pub fn validate(root: u32, parent: &[u64], edges: &[[u32; 2]], component: &[u32]) -> Result<u64, Violation> {
    let level = tree_levels(root, parent)?;
    check_tree_edge_levels(root, parent, &level)?;
    check_span(root, parent, component)?;
    check_edges(root, parent, &level, edges)
}

/// What one Graph500 run measured.
#[derive(Clone, Debug, Serialize)]
pub struct BfsOutcome {
    /// SCALE.
    pub scale: u32,
    /// Edge factor.
    pub edgefactor: u32,
    /// Seconds to generate the edge list (not timed by the specification).
    pub generate_seconds: f64,
    /// Kernel 1: CSR construction.
    pub construction_seconds: f64,
    /// Seconds of each search (kernel 2), in root order.
    pub bfs_seconds: Vec<f64>,
    /// Traversed edges per second of each search.
    pub teps: Vec<f64>,
    /// Harmonic mean of `teps` (the specification's figure of merit).
    pub teps_hmean: f64,
    /// Whether every search passed validation.
    pub valid: bool,
    /// The first violation, if any.
    pub violation: Option<String>,
    /// CPUs the search threads ran on.
    pub cpus: Vec<Option<usize>>,
}

/// Bytes of memory [`run`] needs for `scale` and `edgefactor`: edge list,
/// offsets, adjacency, parents and queue.
pub fn footprint(scale: u32, edgefactor: u32) -> usize {
    let (n, m) = (vertices(scale), edge_count(scale, edgefactor));
    arena_bytes(&[m * 8, (n + 1) * 8, 2 * m * 4, n * 8, n * 8])
}

/// Harmonic mean of positive rates.
pub fn harmonic_mean(x: &[f64]) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    x.len() as f64 / x.iter().map(|v| 1.0 / v).sum::<f64>()
}

/// Generates, builds (kernel 1), then for each thread count searches from
/// up to `roots` keys (kernel 2) and validates each search, all in `mem`.
/// The graph is built once; the outcomes share its generation and
/// construction times.
pub fn run(
    mem: &mut dyn Memory,
    scale: u32,
    edgefactor: u32,
    seed: u64,
    roots: usize,
    thread_counts: &[usize],
    mut progress: impl FnMut(&str),
) -> Result<Vec<(usize, BfsOutcome)>, MemoryError> {
    let most = thread_counts.iter().copied().max().unwrap_or(1);
    let (n, m) = (vertices(scale), edge_count(scale, edgefactor));
    let mut arena = Arena::new(mem.bytes_mut());
    let edges: &mut [[u32; 2]] = arena.take(m)?;
    let offsets: &mut [u64] = arena.take(n + 1)?;
    let adj: &mut [u32] = arena.take(2 * m)?;
    let parent = tiermem_sys::atomic::as_atomic_u64(arena.take(n)?);
    let queue = tiermem_sys::atomic::as_atomic_u64(arena.take(n)?);
    let t = Instant::now();
    generate_edges(scale, seed, edges, most);
    let generate_seconds = t.elapsed().as_secs_f64();
    let edges: &[[u32; 2]] = edges;
    let t = Instant::now();
    let used = build_csr(edges, offsets, adj);
    let construction_seconds = t.elapsed().as_secs_f64();
    let g = Csr {
        offsets,
        adj: &adj[..used],
    };
    progress(&format!(
        "SCALE {scale}: generated {m} edges in {generate_seconds:.2}s, CSR in {construction_seconds:.2}s"
    ));
    let component = components(n, edges);
    let keys = sample_roots(&g, seed, roots);
    let mut snapshot = vec![0u64; n];
    let mut outs = Vec::new();
    for &threads in thread_counts {
        let mut out = BfsOutcome {
            scale,
            edgefactor,
            generate_seconds,
            construction_seconds,
            bfs_seconds: Vec::new(),
            teps: Vec::new(),
            teps_hmean: 0.0,
            valid: !keys.is_empty(),
            violation: None,
            cpus: Vec::new(),
        };
        for (k, &root) in keys.iter().enumerate() {
            let t = Instant::now();
            out.cpus = bfs(&g, root, parent, queue, threads);
            let s = t.elapsed().as_secs_f64();
            for (d, p) in snapshot.iter_mut().zip(parent) {
                *d = p.load(Ordering::Relaxed);
            }
            match validate(root, &snapshot, edges, &component) {
                Ok(nedge) => {
                    out.bfs_seconds.push(s);
                    out.teps.push(nedge as f64 / s);
                }
                Err(e) => {
                    out.valid = false;
                    out.violation.get_or_insert(format!("root {root}: {e}"));
                }
            }
            if (k + 1) % 16 == 0 {
                progress(&format!(
                    "  threads={threads}: {} / {} searches validated",
                    k + 1,
                    keys.len()
                ));
            }
        }
        out.teps_hmean = harmonic_mean(&out.teps);
        outs.push((threads, out));
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    // 0-1, 1-2, 2-3, 0-2 (component {0,1,2,3}); 4-5 apart.
    const EDGES: [[u32; 2]; 5] = [[0, 1], [1, 2], [2, 3], [0, 2], [4, 5]];
    // Levels 0, 1, 1, 2.
    const GOOD: [u64; 6] = [0, 0, 0, 2, NONE, NONE];

    fn check(parent: &[u64]) -> Result<u64, Violation> {
        validate(0, parent, &EDGES, &components(6, &EDGES))
    }

    #[test]
    fn accepts_a_bfs_tree() {
        assert_eq!(check(&GOOD), Ok(4));
    }

    #[test]
    fn rule1_rejects_a_cycle_and_a_wrong_root() {
        let mut p = GOOD;
        p[1] = 2;
        p[2] = 1;
        assert!(matches!(check(&p), Err(Violation::NotATree { .. })));
        let mut p = GOOD;
        p[0] = 1;
        assert!(matches!(check(&p), Err(Violation::NotATree { .. })));
    }

    #[test]
    fn rule2_rejects_tree_edges_across_two_levels() {
        let level = [0, 1, 1, 3, UNREACHED, UNREACHED];
        assert!(matches!(
            check_tree_edge_levels(0, &GOOD, &level),
            Err(Violation::TreeEdgeLevel { vertex: 3, .. })
        ));
    }

    #[test]
    fn rule3_rejects_a_spanning_tree_that_is_not_breadth_first() {
        let mut p = GOOD;
        p[2] = 1; // 2 at level 2, but input edge 0-2 joins levels 0 and 2
        assert!(matches!(check(&p), Err(Violation::EdgeLevelGap { .. })));
    }

    #[test]
    fn rule4_rejects_a_missing_and_an_extra_vertex() {
        let mut p = GOOD;
        p[3] = NONE;
        assert_eq!(
            check(&p),
            Err(Violation::Span {
                vertex: 3,
                reached: false
            })
        );
        let mut p = GOOD;
        p[4] = 0;
        assert_eq!(
            check(&p),
            Err(Violation::Span {
                vertex: 4,
                reached: true
            })
        );
    }

    #[test]
    fn rule5_rejects_a_parent_without_an_edge() {
        let mut p = GOOD;
        p[3] = 0; // no edge 0-3; levels stay consistent
        assert_eq!(check(&p), Err(Violation::NotAnEdge { vertex: 3, parent: 0 }));
    }

    #[test]
    fn kronecker_graph_csr_and_bfs_validate_at_both_thread_counts() {
        let scale = 10;
        let mut edges = vec![[0u32; 2]; edge_count(scale, 16)];
        generate_edges(scale, 1, &mut edges, 2);
        let mut again = vec![[0u32; 2]; edges.len()];
        generate_edges(scale, 1, &mut again, 1);
        assert_eq!(edges, again, "generation must not depend on threads");
        let n = vertices(scale);
        let mut offsets = vec![0u64; n + 1];
        let mut adj = vec![0u32; 2 * edges.len()];
        let used = build_csr(&edges, &mut offsets, &mut adj);
        let loops = edges.iter().filter(|e| e[0] == e[1]).count();
        assert_eq!(used, 2 * (edges.len() - loops));
        let g = Csr {
            offsets: &offsets,
            adj: &adj[..used],
        };
        let roots = sample_roots(&g, 1, SEARCH_KEYS);
        assert_eq!(roots.len(), SEARCH_KEYS);
        assert!(roots.iter().all(|&r| g.degree(r as usize) > 0));
        let comp = components(n, &edges);
        let mut pw = vec![0u64; n];
        let mut qw = vec![0u64; n];
        for threads in [1, 2] {
            let parent = tiermem_sys::atomic::as_atomic_u64(&mut pw);
            let queue = tiermem_sys::atomic::as_atomic_u64(&mut qw);
            for &r in &roots[..8] {
                bfs(&g, r, parent, queue, threads);
                let snap: Vec<u64> = parent.iter().map(|p| p.load(Ordering::Relaxed)).collect();
                let nedge = validate(r, &snap, &edges, &comp).unwrap();
                assert!(nedge > 0 && nedge <= edges.len() as u64);
            }
        }
    }

    #[test]
    fn run_in_hand_memory() {
        use crate::memory::{allocate, Backing, Provider};
        let mut a = allocate(Backing::Small4K, Provider::Hand, footprint(9, 16)).unwrap();
        let outs = run(a.memory.as_mut(), 9, 16, 2, SEARCH_KEYS, &[1, 2], |_| {}).unwrap();
        for (_, o) in outs {
            assert!(o.valid, "{:?}", o.violation);
            assert_eq!(o.teps.len(), SEARCH_KEYS);
            assert!(o.teps_hmean > 0.0);
        }
    }
}
