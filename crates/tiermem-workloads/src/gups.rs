//! HPCC RandomAccess (GUPS) by its rules.
//!
//! A table of `2^n` 64-bit words, `T[i] = i`; `4 * 2^n` updates
//! `T[ran & (N - 1)] ^= ran` where `ran` runs through the shift-register
//! sequence `ran = (ran << 1) ^ (ran < 0 ? POLY : 0)`, `POLY = 7`. As in
//! HPCC's single-node code the sequence is cut into 128 streams whose
//! starting points come from [`starts`], so that updates of different
//! streams are independent (memory-level parallelism); threads split the
//! streams. Updates are unsynchronized read-xor-writes (relaxed load and
//! store), so concurrent updates of one word may lose one: the rules allow
//! up to 1% wrong words. Verification replays the whole sequence
//! sequentially (XOR twice restores `T[i] = i`) and counts wrong words.

use crate::memory::{pinned_team, Arena, Memory, MemoryError, TierStats};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The primitive polynomial of the sequence.
pub const POLY: u64 = 7;
/// The period of the sequence.
pub const PERIOD: i64 = 1_317_624_576_693_539_401;
/// Streams the update sequence is cut into (HPCC's 128).
pub const STREAMS: u64 = 128;

/// The element after `ran`.
#[inline]
pub fn next(ran: u64) -> u64 {
    (ran << 1) ^ if (ran as i64) < 0 { POLY } else { 0 }
}

/// HPCC_starts: element `n` of the sequence (element 0 is 1), by repeated
/// squaring in GF(2)[x] / POLY.
pub fn starts(mut n: i64) -> u64 {
    while n < 0 {
        n += PERIOD;
    }
    while n > PERIOD {
        n -= PERIOD;
    }
    if n == 0 {
        return 1;
    }
    let mut m2 = [0u64; 64];
    let mut temp = 1u64;
    for m in m2.iter_mut() {
        *m = temp;
        temp = next(next(temp));
    }
    let mut i = 62i32;
    while i >= 0 && (n >> i) & 1 == 0 {
        i -= 1;
    }
    let mut ran = 2u64;
    while i > 0 {
        let mut temp = 0;
        for (j, m) in m2.iter().enumerate() {
            if (ran >> j) & 1 != 0 {
                temp ^= m;
            }
        }
        ran = temp;
        i -= 1;
        if (n >> i) & 1 != 0 {
            ran = next(ran);
        }
    }
    ran
}

/// Applies `updates` updates to `table` (a power of two of words) with
/// `threads` threads pinned to CPUs 0, 1, ...; returns the CPUs used.
pub fn update(table: &[AtomicU64], updates: u64, threads: usize) -> Vec<Option<usize>> {
    let mask = table.len() as u64 - 1;
    let streams = STREAMS.min(updates.max(1));
    let per_stream = updates / streams;
    let threads = threads.max(1) as u64;
    pinned_team(threads as usize, |t| {
        let mine: Vec<u64> = (0..streams).filter(|j| j % threads == t as u64).collect();
        let mut ran: Vec<u64> = mine.iter().map(|&j| starts((per_stream * j) as i64)).collect();
        for _ in 0..per_stream {
            for r in ran.iter_mut() {
                *r = next(*r);
                let w = &table[(*r & mask) as usize];
                w.store(w.load(Ordering::Relaxed) ^ *r, Ordering::Relaxed);
            }
        }
    })
    .into_iter()
    .map(|((), cpu)| cpu)
    .collect()
}

/// Replays the sequence sequentially and counts the words that are not
/// `T[i] = i` afterwards.
pub fn verify(table: &mut [u64], updates: u64) -> u64 {
    let mask = table.len() as u64 - 1;
    let streams = STREAMS.min(updates.max(1));
    let mut ran = 1u64;
    for _ in 0..updates / streams * streams {
        ran = next(ran);
        table[(ran & mask) as usize] ^= ran;
    }
    table.iter().enumerate().filter(|&(i, &w)| w != i as u64).count() as u64
}

/// What one RandomAccess run measured.
#[derive(Clone, Debug, Serialize)]
pub struct GupsOutcome {
    /// log2 of the table size in words.
    pub log2_table: u32,
    /// Updates applied.
    pub updates: u64,
    /// Seconds to set `T[i] = i` (not timed).
    pub init_seconds: f64,
    /// Seconds of the timed updates.
    pub seconds: f64,
    /// Giga-updates per second.
    pub gups: f64,
    /// Seconds of the sequential verification.
    pub verify_seconds: f64,
    /// Wrong words after the replay.
    pub errors: u64,
    /// Errors within the rules: none with one thread, at most 1% of the
    /// table with several.
    pub valid: bool,
    /// CPUs the update threads ran on.
    pub cpus: Vec<Option<usize>>,
    /// Tiering counters of the timed updates.
    pub tier: Option<TierStats>,
}

/// Table bytes for `log2_table`.
pub fn footprint(log2_table: u32) -> usize {
    8usize << log2_table
}

/// Runs RandomAccess over a table of `2^log2_table` words in `mem`:
/// `updates` updates (the rules' `4 * 2^n` when `None`; fewer for slow
/// tiered runs). Tiering counters cover the timed updates alone.
pub fn run(
    mem: &mut dyn Memory,
    log2_table: u32,
    updates: Option<u64>,
    threads: usize,
) -> Result<GupsOutcome, MemoryError> {
    let n = 1usize << log2_table;
    let updates = updates.unwrap_or(4 * n as u64);
    let table: &mut [u64] = Arena::new(mem.bytes_mut()).take(n)?;
    let t = Instant::now();
    for (i, w) in table.iter_mut().enumerate() {
        *w = i as u64;
    }
    let init_seconds = t.elapsed().as_secs_f64();
    mem.reset_tier_stats();
    let table: &mut [u64] = Arena::new(mem.bytes_mut()).take(n)?;
    let t = Instant::now();
    let cpus = update(tiermem_sys::atomic::as_atomic_u64(table), updates, threads);
    let seconds = t.elapsed().as_secs_f64();
    let tier = mem.tier_stats();
    let table: &mut [u64] = Arena::new(mem.bytes_mut()).take(n)?;
    let t = Instant::now();
    let errors = verify(table, updates);
    let verify_seconds = t.elapsed().as_secs_f64();
    let allowed = if threads > 1 { n as u64 / 100 } else { 0 };
    Ok(GupsOutcome {
        log2_table,
        updates,
        init_seconds,
        seconds,
        gups: updates as f64 / seconds / 1e9,
        verify_seconds,
        errors,
        valid: errors <= allowed,
        cpus,
        tier,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_jumps_along_the_sequence() {
        let mut ran = 1u64;
        for k in 0..1000i64 {
            assert_eq!(starts(k), ran, "element {k}");
            ran = next(ran);
        }
        assert_eq!(starts(PERIOD), 1);
    }

    #[test]
    fn updates_verify_and_corruption_is_caught() {
        for threads in [1, 2] {
            let mut t: Vec<u64> = (0..1u64 << 12).collect();
            let updates = 4 << 12;
            update(tiermem_sys::atomic::as_atomic_u64(&mut t), updates, threads);
            assert!(t.iter().enumerate().any(|(i, &w)| w != i as u64));
            let mut copy = t.clone();
            assert!(verify(&mut copy, updates) <= if threads == 1 { 0 } else { 40 });
            t[77] ^= 1;
            assert!(verify(&mut t, updates) >= 1);
        }
    }

    #[test]
    fn run_in_hand_memory() {
        use crate::memory::{allocate, Backing, Provider};
        let mut a = allocate(Backing::Thp, Provider::Hand, footprint(16)).unwrap();
        let o = run(a.memory.as_mut(), 16, None, 2).unwrap();
        assert!(o.valid && o.gups > 0.0, "{o:?}");
        assert_eq!(o.updates, 4 << 16);
    }
}
