//! Pointer chasing: the latency of one dependent access, which exposes the
//! page-walk cost directly.
//!
//! The footprint is cut into 64-byte slots (one cache line each); the first
//! word of each slot holds the index of the next slot of a random cyclic
//! permutation made by Sattolo's algorithm, so one walk visits every slot
//! once per cycle in random order and each load depends on the previous one.

use crate::memory::{Arena, Memory, MemoryError, TierStats};
use crate::rng::Rng;
use serde::Serialize;
use std::time::Instant;

/// One cache line.
pub type Slot = [u64; 8];

/// Links `slots` into one random cycle: `slots[i][0]` is the successor of
/// `i`.
pub fn build_cycle(slots: &mut [Slot], seed: u64) {
    for (i, s) in slots.iter_mut().enumerate() {
        s[0] = i as u64;
    }
    let mut rng = Rng::new(seed);
    for i in (1..slots.len()).rev() {
        let j = rng.below(i as u64) as usize;
        let (a, b) = (slots[i][0], slots[j][0]);
        slots[i][0] = b;
        slots[j][0] = a;
    }
}

/// Follows `steps` links from slot 0; returns where the walk ended.
pub fn walk(slots: &[Slot], steps: u64) -> u64 {
    let mut p = 0u64;
    for _ in 0..steps {
        p = slots[p as usize][0];
    }
    std::hint::black_box(p)
}

/// What one chase measured.
#[derive(Clone, Debug, Serialize)]
pub struct ChaseOutcome {
    /// Slots in the cycle.
    pub slots: u64,
    /// Dependent accesses timed.
    pub steps: u64,
    /// Seconds to build the cycle (not timed).
    pub init_seconds: f64,
    /// Seconds of the timed walk.
    pub seconds: f64,
    /// Nanoseconds per dependent access.
    pub ns_per_access: f64,
    /// The walk ended where following the links one by one says it must.
    pub valid: bool,
    /// Tiering counters of the timed walk.
    pub tier: Option<TierStats>,
}

/// Builds a cycle over `bytes` of `mem` and times `steps` dependent
/// accesses after `steps / 8` untimed ones.
pub fn run(mem: &mut dyn Memory, bytes: usize, steps: u64, seed: u64) -> Result<ChaseOutcome, MemoryError> {
    let n = bytes / std::mem::size_of::<Slot>();
    let t = Instant::now();
    {
        let slots: &mut [Slot] = Arena::new(mem.bytes_mut()).take(n)?;
        build_cycle(slots, seed);
        walk(slots, steps / 8);
    }
    let init_seconds = t.elapsed().as_secs_f64();
    mem.reset_tier_stats();
    let slots: &mut [Slot] = Arena::new(mem.bytes_mut()).take(n)?;
    let t = Instant::now();
    let end = walk(slots, steps);
    let seconds = t.elapsed().as_secs_f64();
    let tier = mem.tier_stats();
    // On one cycle of all n slots, `steps` links from 0 end where
    // `steps mod n` links do.
    let slots: &mut [Slot] = Arena::new(mem.bytes_mut()).take(n)?;
    let from_zero = walk(slots, steps % n as u64);
    Ok(ChaseOutcome {
        slots: n as u64,
        steps,
        init_seconds,
        seconds,
        ns_per_access: seconds * 1e9 / steps as f64,
        valid: end == from_zero && n > 1,
        tier,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cycle_visits_every_slot_once() {
        for n in [2usize, 3, 1000] {
            let mut s = vec![[0u64; 8]; n];
            build_cycle(&mut s, 9);
            let mut seen = vec![false; n];
            let mut p = 0usize;
            for _ in 0..n {
                assert!(!seen[p], "slot {p} visited twice");
                seen[p] = true;
                p = s[p][0] as usize;
            }
            assert_eq!(p, 0, "the walk returns to 0 after n steps");
            assert!(seen.iter().all(|&x| x));
        }
    }

    #[test]
    fn run_in_hand_memory() {
        use crate::memory::{allocate, Backing, Provider};
        let mut a = allocate(Backing::Small4K, Provider::Hand, 1 << 20).unwrap();
        let o = run(a.memory.as_mut(), 1 << 20, 100_000, 1).unwrap();
        assert!(o.valid && o.ns_per_access > 0.0, "{o:?}");
    }
}
