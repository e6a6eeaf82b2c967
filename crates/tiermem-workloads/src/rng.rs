//! A small deterministic generator (SplitMix64) for the workloads' inputs:
//! seeded by a number, cheap to fork per item so that parallel generation
//! gives the same data at every thread count.

/// SplitMix64's output function: a well-mixed 64-bit hash of `z`.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A SplitMix64 stream.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(mix(seed))
    }

    /// The stream of item `i` of the data seeded by `seed`.
    pub fn for_item(seed: u64, i: u64) -> Rng {
        Rng(mix(seed ^ mix(i.wrapping_add(0x5851_f42d_4c95_7f2d))))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, n) (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_is_deterministic() {
        let mut a = Rng::new(3);
        let mut b = Rng::new(3);
        for _ in 0..1000 {
            let x = a.below(7);
            assert!(x < 7);
            assert_eq!(x, b.below(7));
        }
        let u = Rng::for_item(1, 2).unit();
        assert!((0.0..1.0).contains(&u));
    }
}
