//! A budget simulated over a policy, for the policies' tests.

use super::Policy;

/// `budget` resident pages of `n`, run by `policy` as the engine would: a
/// miss evicts the policy's victim (and says it left) when full, then
/// fills the page.
pub(super) struct Sim<'a> {
    policy: &'a mut dyn Policy,
    resident: Vec<bool>,
    count: usize,
    budget: usize,
}

impl<'a> Sim<'a> {
    pub(super) fn new(policy: &'a mut dyn Policy, n: usize, budget: usize) -> Sim<'a> {
        Sim {
            policy,
            resident: vec![false; n],
            count: 0,
            budget,
        }
    }

    /// Accesses page `p`; true on a miss.
    pub(super) fn access(&mut self, p: usize) -> bool {
        if self.resident[p] {
            return false;
        }
        if self.count == self.budget {
            let mut v = [0usize; 1];
            assert_eq!(self.policy.select_victims(&mut v), 1);
            self.resident[v[0]] = false;
            self.policy.on_evicted(v[0]);
            self.count -= 1;
        }
        self.policy.on_fill(p);
        self.resident[p] = true;
        self.count += 1;
        true
    }
}

/// Misses of an access string through `budget` pages of `n`.
pub(super) fn misses(
    policy: &mut dyn Policy,
    accesses: impl Iterator<Item = usize>,
    n: usize,
    budget: usize,
) -> usize {
    let mut sim = Sim::new(policy, n, budget);
    accesses.filter(|&p| sim.access(p)).count()
}

/// A xorshift64 sequence (its first value is the seed's successor).
pub(super) fn xorshift(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}
