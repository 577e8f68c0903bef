//! Data placement: which worker holds (owns) each partition.

/// Owner of each partition. With no weights partitions go round-robin; with
/// weights (a skewed data share) each worker gets a quota of partitions in
/// proportion to its weight, at least one each, by largest remainder, and
/// partitions are dealt round-robin among workers that still have quota.
///
/// The caller has checked `workers >= 1` and `partitions >= workers`.
pub fn place_partitions(partitions: u32, workers: u32, weights: Option<&[f64]>) -> Vec<u32> {
    let Some(weights) = weights else {
        return (0..partitions).map(|p| p % workers).collect();
    };
    let quotas = quotas(partitions, weights);
    let mut left = quotas.clone();
    let mut owners = Vec::with_capacity(partitions as usize);
    let mut w = 0usize;
    while owners.len() < partitions as usize {
        if left[w] > 0 {
            left[w] -= 1;
            owners.push(w as u32);
        }
        w = (w + 1) % weights.len();
    }
    owners
}

/// Partitions per worker in proportion to `weights` (largest remainder, ties to
/// the lower index), then at least one each, taken from the largest quota.
fn quotas(partitions: u32, weights: &[f64]) -> Vec<u32> {
    let total: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights
        .iter()
        .map(|w| w / total * partitions as f64)
        .collect();
    let mut q: Vec<u32> = exact.iter().map(|e| e.floor() as u32).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        let ra = exact[a] - exact[a].floor();
        let rb = exact[b] - exact[b].floor();
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    let given: u32 = q.iter().sum();
    for &i in order.iter().cycle().take((partitions - given) as usize) {
        q[i] += 1;
    }
    while let Some(empty) = q.iter().position(|&x| x == 0) {
        let (largest, _) = q
            .iter()
            .enumerate()
            .max_by_key(|&(i, &x)| (x, std::cmp::Reverse(i)))
            .expect("at least one worker");
        q[largest] -= 1;
        q[empty] += 1;
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_without_weights() {
        assert_eq!(place_partitions(5, 2, None), vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn flexrr_skew_gives_half_the_workers_three_quarters() {
        let weights = [0.1875, 0.1875, 0.0625, 0.0625];
        let owners = place_partitions(48, 4, Some(&weights));
        let heavy = owners.iter().filter(|&&w| w < 2).count();
        assert_eq!(heavy, 36);
        for w in 0..4 {
            assert!(owners.contains(&w));
        }
    }

    #[test]
    fn quotas_sum_to_partitions() {
        for p in 3..40 {
            let q = quotas(p, &[0.5, 0.3, 0.2]);
            assert_eq!(q.iter().sum::<u32>(), p);
            assert!(q.iter().all(|&x| x >= 1));
        }
    }
}
