//! Counter-based randomness: every random draw is a pure function of its key.
//!
//! Straggler schedules, data partitioning and row sampling must be identical for
//! every worker count and every policy, so nothing here keeps state: a draw is
//! `hash(seed, stream, a, b, …)` mapped to the unit interval.

/// SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hashes a key made of several words into one 64-bit value.
#[inline]
pub fn hash_words(words: &[u64]) -> u64 {
    let mut h = 0x6A09_E667_F3BC_C909_u64;
    for &w in words {
        h = mix64(h ^ w);
    }
    h
}

/// A uniform draw in `[0, 1)` (53 random bits) keyed by `words`.
#[inline]
pub fn uniform(words: &[u64]) -> f64 {
    (hash_words(words) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A small sequential generator for places that need many draws from one key
/// (shuffles). Its whole state is derived from the key, so it is reproducible.
#[derive(Debug, Clone)]
pub struct KeyedRng {
    state: u64,
}

impl KeyedRng {
    /// A generator whose stream is determined by `words`.
    pub fn new(words: &[u64]) -> Self {
        Self {
            state: hash_words(words),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// A uniform integer in `0..n` (n > 0), by Lemire's multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_deterministic_and_in_range() {
        for i in 0..10_000u64 {
            let u = uniform(&[7, i]);
            assert!((0.0..1.0).contains(&u));
            assert_eq!(u.to_bits(), uniform(&[7, i]).to_bits());
        }
        assert_ne!(uniform(&[1, 2]), uniform(&[2, 1]));
    }

    #[test]
    fn uniform_mean_and_spread_are_right() {
        let n = 100_000u64;
        let draws: Vec<f64> = (0..n).map(|i| uniform(&[42, i])).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        let below_tenth = draws.iter().filter(|&&u| u < 0.1).count() as f64 / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        assert!((below_tenth - 0.1).abs() < 0.005, "P(u<0.1) {below_tenth}");
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut v: Vec<u32> = (0..1000).collect();
        KeyedRng::new(&[3]).shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(v, sorted);
    }
}
