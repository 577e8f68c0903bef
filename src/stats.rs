//! Summary statistics shared by every stage: median, mean and nearest-rank
//! quantiles.

use std::borrow::Borrow;

/// The middle of `sorted` (the mean of the middle two for an even count, as
/// `midpoint` computes it); `None` when empty.
pub fn sorted_median<T: Copy>(sorted: &[T], midpoint: impl Fn(T, T) -> T) -> Option<T> {
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some(midpoint(sorted[n / 2 - 1], sorted[n / 2])),
    }
}

/// Median of `v` (the mean of the middle two for an even count; 0 when
/// empty); sorts `v`.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    sorted_median(v, |a, b| (a + b) / 2.0).unwrap_or(0.0)
}

/// Median of `sorted` integers (the truncated mean of the middle two for an
/// even count; 0 when empty).
pub fn median_u64(sorted: &[u64]) -> u64 {
    sorted_median(sorted, |a, b| (a + b) / 2).unwrap_or(0)
}

/// The mean of `values` (0 for none).
pub fn mean<V: Borrow<f64>>(values: impl IntoIterator<Item = V>) -> f64 {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + *v.borrow(), n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// The `q`-quantile (0..=1) of `values` by nearest rank.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    quantiles(values, [q])[0]
}

/// The `qs`-quantiles of `values` by nearest rank, sorting them once (0 for
/// no values).
pub fn quantiles<const N: usize>(values: &[f64], qs: [f64; N]) -> [f64; N] {
    if values.is_empty() {
        return [0.0; N];
    }
    let mut v = values.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    qs.map(|q| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median_u64(&[1, 2, 4, 9]), 3);
        assert_eq!(median_u64(&[1, 2, 9]), 2);
        assert_eq!(median_u64(&[]), 0);
    }

    #[test]
    fn mean_of_nothing_is_zero() {
        assert_eq!(mean([1.0, 2.0, 6.0]), 3.0);
        assert_eq!(mean(Vec::<f64>::new()), 0.0);
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 10.0);
        assert_eq!(quantile(&v, 0.95), 19.0);
        assert_eq!(quantile(&v, 1.0), 20.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
        assert_eq!(quantiles(&v, [0.1, 0.9]), [2.0, 18.0]);
    }
}
