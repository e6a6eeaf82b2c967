//! An NPB-style conjugate-gradient kernel over a random sparse symmetric
//! positive-definite matrix.
//!
//! The matrix is a permuted band: row `s` of a circulant pattern has the
//! partners `s ± d_k` for `nonzeros / 2` random offsets `d_k`, and a random
//! permutation `π` of the rows and columns scatters them, so that row
//! `π(s)` reads `x` at `nonzeros` random places (as NPB CG's `makea` matrix
//! does). Values are symmetric hashes in (0, 1); the diagonal is
//! `1.5 * Σ|a_ij| + 1`, strictly dominant, so the matrix is SPD with a
//! condition number below 5 (Gershgorin). The right-hand side is `b = A x*` for a known
//! `x*`. The solve runs a fixed number of CG iterations with `threads`
//! threads pinned to CPUs 0, 1, ... (rows split evenly; every thread sums the
//! per-thread partial dot products in the same order, so all agree).
//!
//! Verification: the true residual `||b - A x|| / ||b||` is below 1e-8 and
//! within 1e-9 of the recurrence's `sqrt(r·r) / ||b||`, and `x` is within
//! 1e-6 of `x*` (relative), whatever the thread count. All arrays (row
//! starts, columns, values, diagonal, five vectors) live in the [`Memory`].

use crate::memory::{arena_bytes, pinned_team, Arena, Memory, MemoryError, TierStats};
use crate::rng::{mix, Rng};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::Instant;

/// Bytes of memory for `n` rows with `nonzeros` off-diagonal entries each.
pub fn footprint(n: usize, nonzeros: usize) -> usize {
    let nnz = n * nonzeros;
    arena_bytes(&[
        (n + 1) * 8,
        nnz * 4,
        nnz * 8,
        n * 8,
        n * 8,
        n * 8,
        n * 8,
        n * 8,
        n * 8,
    ])
}

/// The rows whose [`footprint`] fits in `bytes`.
pub fn rows_for(bytes: usize, nonzeros: usize) -> usize {
    let mut n = bytes / (nonzeros * 12 + 8 * 7);
    while n > 1 && footprint(n, nonzeros) > bytes {
        n -= n / 64 + 1;
    }
    n
}

/// The known solution.
fn x_star(i: usize) -> f64 {
    1.0 + (i % 7) as f64 / 7.0
}

/// A sparse matrix in CSR with a separate diagonal.
pub struct Matrix<'a> {
    /// Row starts (`n + 1`).
    pub rowptr: &'a [u64],
    /// Column of each off-diagonal entry.
    pub cols: &'a [u32],
    /// Value of each off-diagonal entry.
    pub vals: &'a [f64],
    /// The diagonal.
    pub diag: &'a [f64],
}

/// Builds the matrix of `seed` (see the module docs) into the arrays, with
/// `threads` threads; `nonzeros` must be even and below `n / 2`.
pub fn make_matrix(
    seed: u64,
    nonzeros: usize,
    rowptr: &mut [u64],
    cols: &mut [u32],
    vals: &mut [f64],
    diag: &mut [f64],
    threads: usize,
) {
    let n = diag.len();
    assert!(
        nonzeros.is_multiple_of(2) && nonzeros > 0 && nonzeros < n / 2,
        "nonzeros must be even and below n/2"
    );
    let mut rng = Rng::new(seed);
    let mut offsets: Vec<usize> = Vec::with_capacity(nonzeros / 2);
    while offsets.len() < nonzeros / 2 {
        let d = 1 + rng.below((n / 2 - 1) as u64) as usize;
        if !offsets.contains(&d) {
            offsets.push(d);
        }
    }
    let mut perm: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        perm.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut inv = vec![0u32; n];
    for (s, &p) in perm.iter().enumerate() {
        inv[p as usize] = s as u32;
    }
    for (r, p) in rowptr.iter_mut().enumerate() {
        *p = (r * nonzeros) as u64;
    }
    let rows = n.div_ceil(threads.max(1));
    let (perm, inv, offsets) = (&perm, &inv, &offsets);
    std::thread::scope(|sc| {
        for ((k, (c, v)), d) in cols
            .chunks_mut(rows * nonzeros)
            .zip(vals.chunks_mut(rows * nonzeros))
            .enumerate()
            .zip(diag.chunks_mut(rows))
        {
            sc.spawn(move || {
                for (i, dg) in d.iter_mut().enumerate() {
                    let r = k * rows + i;
                    let s = inv[r] as usize;
                    let mut sum = 0.0;
                    for (e, &o) in offsets.iter().enumerate() {
                        for (h, t) in [(0, (s + o) % n), (1, (s + n - o) % n)] {
                            let (a, b) = (s.min(t) as u64, s.max(t) as u64);
                            let val = (mix(seed ^ mix(a << 32 | b)) >> 11) as f64 / (1u64 << 53) as f64;
                            let at = i * nonzeros + 2 * e + h;
                            c[at] = perm[t];
                            v[at] = val;
                            sum += val;
                        }
                    }
                    *dg = 1.5 * sum + 1.0;
                }
            });
        }
    });
}

/// `y[r] = (A x)[r]` for one row.
#[inline]
fn row_times(m: &Matrix<'_>, r: usize, x: impl Fn(usize) -> f64) -> f64 {
    let (a, b) = (m.rowptr[r] as usize, m.rowptr[r + 1] as usize);
    let mut s = m.diag[r] * x(r);
    for (c, v) in m.cols[a..b].iter().zip(&m.vals[a..b]) {
        s += v * x(*c as usize);
    }
    s
}

fn ld(a: &[AtomicU64], i: usize) -> f64 {
    f64::from_bits(a[i].load(Relaxed))
}

fn st(a: &[AtomicU64], i: usize, v: f64) {
    a[i].store(v.to_bits(), Relaxed)
}

/// The shared vectors of a solve.
pub struct Vectors<'a> {
    /// Right-hand side.
    pub b: &'a [AtomicU64],
    /// Solution.
    pub x: &'a [AtomicU64],
    /// Residual.
    pub r: &'a [AtomicU64],
    /// Search direction.
    pub p: &'a [AtomicU64],
    /// `A p`.
    pub q: &'a [AtomicU64],
}

/// `iterations` CG iterations from `x = 0` with `threads` threads; returns
/// the recurrence's `r·r` and the CPUs used.
pub fn solve(
    m: &Matrix<'_>,
    v: &Vectors<'_>,
    iterations: usize,
    threads: usize,
) -> (f64, Vec<Option<usize>>) {
    let n = m.diag.len();
    let threads = threads.max(1);
    let part = n.div_ceil(threads);
    let pa: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let pb: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let sum = |p: &[AtomicU64]| p.iter().map(|x| f64::from_bits(x.load(Relaxed))).sum::<f64>();
    let barrier = Barrier::new(threads);
    let team = pinned_team(threads, |t| {
        let rows = (t * part).min(n)..((t + 1) * part).min(n);
        let mut rr = 0.0;
        for i in rows.clone() {
            let bi = ld(v.b, i);
            st(v.x, i, 0.0);
            st(v.r, i, bi);
            st(v.p, i, bi);
            rr += bi * bi;
        }
        pb[t].store(rr.to_bits(), Relaxed);
        barrier.wait();
        let mut rho = sum(&pb);
        for _ in 0..iterations {
            let mut pq = 0.0;
            for i in rows.clone() {
                let qi = row_times(m, i, |c| ld(v.p, c));
                st(v.q, i, qi);
                pq += ld(v.p, i) * qi;
            }
            pa[t].store(pq.to_bits(), Relaxed);
            barrier.wait();
            let alpha = rho / sum(&pa);
            let mut rr = 0.0;
            for i in rows.clone() {
                st(v.x, i, ld(v.x, i) + alpha * ld(v.p, i));
                let ri = ld(v.r, i) - alpha * ld(v.q, i);
                st(v.r, i, ri);
                rr += ri * ri;
            }
            pb[t].store(rr.to_bits(), Relaxed);
            barrier.wait();
            let rho_new = sum(&pb);
            let beta = rho_new / rho;
            for i in rows.clone() {
                st(v.p, i, ld(v.r, i) + beta * ld(v.p, i));
            }
            rho = rho_new;
            barrier.wait();
        }
        rho
    });
    (team[0].0, team.into_iter().map(|(_, c)| c).collect())
}

/// The checks of a finished solve.
#[derive(Clone, Debug, Serialize)]
pub struct CgCheck {
    /// `||b - A x|| / ||b||`, recomputed.
    pub true_residual: f64,
    /// `sqrt(r·r) / ||b||` from the recurrence.
    pub recurrence_residual: f64,
    /// `||x - x*|| / ||x*||`.
    pub solution_error: f64,
    /// All three within tolerance.
    pub valid: bool,
}

/// Verifies `x` against `b`, the recurrence's `rr` and the known solution.
pub fn check(m: &Matrix<'_>, v: &Vectors<'_>, rr: f64) -> CgCheck {
    let n = m.diag.len();
    let (mut res, mut bb, mut err, mut xs) = (0.0, 0.0, 0.0, 0.0);
    for i in 0..n {
        let bi = ld(v.b, i);
        let d = bi - row_times(m, i, |c| ld(v.x, c));
        res += d * d;
        bb += bi * bi;
        let e = ld(v.x, i) - x_star(i);
        err += e * e;
        xs += x_star(i) * x_star(i);
    }
    let true_residual = (res / bb).sqrt();
    let recurrence_residual = (rr / bb).sqrt();
    let solution_error = (err / xs).sqrt();
    CgCheck {
        true_residual,
        recurrence_residual,
        solution_error,
        valid: true_residual < 1e-8
            && (true_residual - recurrence_residual).abs() < 1e-9
            && solution_error < 1e-6,
    }
}

/// What one CG solve measured.
#[derive(Clone, Debug, Serialize)]
pub struct CgOutcome {
    /// Rows.
    pub n: usize,
    /// Off-diagonal entries per row.
    pub nonzeros: usize,
    /// CG iterations.
    pub iterations: usize,
    /// Threads.
    pub threads: usize,
    /// Seconds to build the matrix and `b` (not timed).
    pub init_seconds: f64,
    /// Seconds of the solve.
    pub seconds: f64,
    /// Floating-point operations per second / 1e9.
    pub gflops: f64,
    /// Verification.
    pub check: CgCheck,
    /// CPUs the threads ran on.
    pub cpus: Vec<Option<usize>>,
    /// Tiering counters of the solve alone.
    pub tier: Option<TierStats>,
}

/// The arrays of a solve, carved from one memory range.
pub struct Arrays<'a> {
    /// Row starts.
    pub rowptr: &'a mut [u64],
    /// Columns.
    pub cols: &'a mut [u32],
    /// Values.
    pub vals: &'a mut [f64],
    /// Diagonal.
    pub diag: &'a mut [f64],
    /// Vectors.
    pub v: Vectors<'a>,
}

impl Arrays<'_> {
    /// Carves the arrays for `n` rows and `nonzeros` entries per row from
    /// `bytes` (the same arrays every time).
    pub fn carve(bytes: &mut [u8], n: usize, nonzeros: usize) -> Result<Arrays<'_>, MemoryError> {
        let mut arena = Arena::new(bytes);
        let rowptr = arena.take(n + 1)?;
        let cols = arena.take(n * nonzeros)?;
        let vals = arena.take(n * nonzeros)?;
        let diag = arena.take(n)?;
        let mut vec = || -> Result<&[AtomicU64], MemoryError> {
            Ok(tiermem_sys::atomic::as_atomic_u64(arena.take(n)?))
        };
        let v = Vectors {
            b: vec()?,
            x: vec()?,
            r: vec()?,
            p: vec()?,
            q: vec()?,
        };
        Ok(Arrays {
            rowptr,
            cols,
            vals,
            diag,
            v,
        })
    }

    /// The matrix.
    pub fn matrix(&self) -> Matrix<'_> {
        Matrix {
            rowptr: self.rowptr,
            cols: self.cols,
            vals: self.vals,
            diag: self.diag,
        }
    }
}

/// Builds the matrix once in `mem`, then solves with each thread count.
/// Tiering counters cover the solve alone (the memory is carved again for
/// each phase, so the counters can be read between phases).
pub fn run(
    mem: &mut dyn Memory,
    n: usize,
    nonzeros: usize,
    iterations: usize,
    seed: u64,
    thread_counts: &[usize],
) -> Result<Vec<CgOutcome>, MemoryError> {
    let t = Instant::now();
    {
        let a = Arrays::carve(mem.bytes_mut(), n, nonzeros)?;
        let most = thread_counts.iter().copied().max().unwrap_or(1);
        make_matrix(seed, nonzeros, a.rowptr, a.cols, a.vals, a.diag, most);
        let m = a.matrix();
        for i in 0..n {
            st(a.v.b, i, row_times(&m, i, x_star));
        }
    }
    let init_seconds = t.elapsed().as_secs_f64();
    let flops = iterations as f64 * (2.0 * (n * nonzeros + n) as f64 + 10.0 * n as f64);
    let mut out = Vec::new();
    for &threads in thread_counts {
        mem.reset_tier_stats();
        let t = Instant::now();
        let (rr, cpus) = {
            let a = Arrays::carve(mem.bytes_mut(), n, nonzeros)?;
            solve(&a.matrix(), &a.v, iterations, threads)
        };
        let seconds = t.elapsed().as_secs_f64();
        let tier = mem.tier_stats();
        let a = Arrays::carve(mem.bytes_mut(), n, nonzeros)?;
        out.push(CgOutcome {
            n,
            nonzeros,
            iterations,
            threads,
            init_seconds,
            seconds,
            gflops: flops / seconds / 1e9,
            check: check(&a.matrix(), &a.v, rr),
            cpus,
            tier,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{allocate, Backing, Provider};

    #[test]
    fn converges_at_both_thread_counts_and_a_perturbed_result_fails() {
        let (n, nz) = (4096, 8);
        let mut a = allocate(Backing::Small4K, Provider::Hand, footprint(n, nz)).unwrap();
        let o = run(a.memory.as_mut(), n, nz, 40, 3, &[1, 2]).unwrap();
        for x in &o {
            assert!(x.check.valid, "{x:?}");
        }
        let d = o[0].check.true_residual - o[1].check.true_residual;
        assert!(d.abs() < 1e-9);
        // Perturb x after a solve: the recomputed residual must catch it.
        let ar = Arrays::carve(a.memory.bytes_mut(), n, nz).unwrap();
        let (m, v) = (ar.matrix(), &ar.v);
        let (rr, _) = solve(&m, v, 40, 2);
        assert!(check(&m, v, rr).valid);
        st(v.x, 17, ld(v.x, 17) + 1e-3);
        let c = check(&m, v, rr);
        assert!(!c.valid && c.true_residual > 1e-8, "{c:?}");
    }

    #[test]
    fn matrix_is_symmetric() {
        let (n, nz) = (64, 4);
        let mut rowptr = vec![0u64; n + 1];
        let mut cols = vec![0u32; n * nz];
        let mut vals = vec![0f64; n * nz];
        let mut diag = vec![0f64; n];
        make_matrix(5, nz, &mut rowptr, &mut cols, &mut vals, &mut diag, 2);
        let at = |r: usize, c: usize| -> f64 {
            (rowptr[r] as usize..rowptr[r + 1] as usize)
                .filter(|&k| cols[k] as usize == c)
                .map(|k| vals[k])
                .sum()
        };
        for r in 0..n {
            assert_eq!(rowptr[r + 1] - rowptr[r], nz as u64);
            for &c in &cols[rowptr[r] as usize..rowptr[r + 1] as usize] {
                let c = c as usize;
                assert_ne!(c, r);
                assert_eq!(at(r, c), at(c, r));
            }
            let off: f64 = vals[r * nz..(r + 1) * nz].iter().sum();
            assert!(diag[r] > off);
        }
    }

    #[test]
    fn rows_fit_the_size() {
        let n = rows_for(64 << 20, 32);
        assert!(footprint(n, 32) <= 64 << 20 && footprint(n + n / 32, 32) > 64 << 20);
    }
}
