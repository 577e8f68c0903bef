//! The decisions of a tune, as pure functions of what the runs measured:
//! successive halving's rungs and who continues, the random strategy's
//! sample, and the ranking.

use std::cmp::Ordering;

use super::target::{best, reached, Point, Target};
use crate::rng;

/// What a configuration's run has measured so far.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// Iterations trained.
    pub iterations: u64,
    /// Its evaluations (on the validation slice) as points of the target's
    /// metric.
    pub points: Vec<Point>,
    /// Why the run failed (diverged, or exited with an error), if it did.
    pub failed: Option<String>,
}

impl Outcome {
    /// The first point at which the run had reached the target.
    pub fn reached(&self, target: &Target) -> Option<Point> {
        reached(target, &self.points)
    }

    /// Adds the points of `earlier` (an earlier segment of the same run)
    /// at iterations this outcome has no point of, keeping them in order.
    pub fn merge_earlier(&mut self, earlier: &Outcome) {
        for p in &earlier.points {
            if !self.points.iter().any(|q| q.iteration == p.iteration) {
                self.points.push(*p);
            }
        }
        self.points.sort_by_key(|p| p.iteration);
    }

    /// Its best value of the target's metric.
    pub fn best(&self, target: &Target) -> Option<f64> {
        best(target, &self.points)
    }
}

/// The iterations each rung trains its configurations to, for `configs`
/// configurations of a job of `iterations`: rung `i` of `R` (each halving
/// the configurations until one is left) trains to `iterations / 2^(R-1-i)`
/// (rounded up), so the last rung trains the winner to the job's end. Rungs
/// that would train no further than the one before are merged.
///
/// No rung trains fewer than `min_iterations` (at most the job's): a model
/// that needs some iterations before configurations differ (the CNN) should
/// not be halved before then.
pub fn rungs(configs: usize, iterations: u64, min_iterations: u64) -> Vec<u64> {
    let halvings = usize::BITS - configs.max(1).saturating_sub(1).leading_zeros(); // ⌈log2 n⌉
    let floor = min_iterations.clamp(1, iterations.max(1));
    let mut out: Vec<u64> = (0..=halvings)
        .map(|i| {
            let shift = halvings - i;
            iterations
                .div_ceil(1u64.checked_shl(shift).unwrap_or(u64::MAX))
                .max(floor)
        })
        .collect();
    out.dedup();
    out
}

/// How many of `n` configurations continue past a rung (half, rounded up).
pub fn keep(n: usize) -> usize {
    n.div_ceil(2)
}

/// `configs` best first: those that reached the target by their time to it;
/// then those that did not, by their best value of the metric; then those
/// without an evaluation; then the failed. Ties go to the earlier
/// configuration.
pub fn rank(target: &Target, configs: &[usize], outcomes: &[Option<Outcome>]) -> Vec<usize> {
    let key = |c: usize| {
        let o = outcomes.get(c).and_then(Option::as_ref);
        match o {
            None => (4, None),
            Some(o) if o.failed.is_some() => (3, None),
            Some(o) => match (o.reached(target), o.best(target)) {
                (Some(p), _) => (0, Some(p.seconds)),
                (None, Some(b)) => (1, Some(b)),
                (None, None) => (2, None),
            },
        }
    };
    let mut order = configs.to_vec();
    order.sort_by(|&a, &b| {
        let (ka, va) = key(a);
        let (kb, vb) = key(b);
        ka.cmp(&kb)
            .then_with(|| match (ka, va, vb) {
                (0, Some(x), Some(y)) => x.total_cmp(&y),
                (1, Some(x), Some(y)) if target.better(x, y) => Ordering::Less,
                (1, Some(x), Some(y)) if target.better(y, x) => Ordering::Greater,
                _ => Ordering::Equal,
            })
            .then(a.cmp(&b))
    });
    order
}

/// The random strategy's configurations: `samples` of `configs` drawn
/// without replacement by a generator keyed by `seed`, in the order drawn.
pub fn sample(configs: usize, samples: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..configs).collect();
    for i in 0..configs.saturating_sub(1) {
        let u = rng::uniform(&[seed, 0x7475_6E65, i as u64]); // "tune"
        let j = i + ((u * (configs - i) as f64) as usize).min(configs - i - 1);
        order.swap(i, j);
    }
    order.truncate(samples.min(configs));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(values: &[f64]) -> Option<Outcome> {
        Some(Outcome {
            iterations: values.len() as u64,
            points: values
                .iter()
                .enumerate()
                .map(|(i, &value)| Point {
                    iteration: i as u64,
                    seconds: i as f64 * 10.0,
                    value,
                })
                .collect(),
            failed: None,
        })
    }

    #[test]
    fn rungs_halve_down_to_the_job_length() {
        assert_eq!(rungs(8, 20, 1), vec![3, 5, 10, 20]);
        assert_eq!(rungs(5, 20, 1), vec![3, 5, 10, 20]);
        assert_eq!(rungs(4, 20, 1), vec![5, 10, 20]);
        assert_eq!(rungs(2, 20, 1), vec![10, 20]);
        assert_eq!(rungs(1, 20, 1), vec![20]);
        assert_eq!(rungs(8, 2, 1), vec![1, 2]);
        assert_eq!(rungs(3, 1, 1), vec![1]);
        assert_eq!(rungs(12, 80, 10), vec![10, 20, 40, 80]);
        assert_eq!(rungs(12, 80, 500), vec![80]);
        assert_eq!((keep(8), keep(5), keep(1)), (4, 3, 1));
    }

    #[test]
    fn ranking_prefers_time_to_target_then_the_best_value() {
        let t = Target::parse("accuracy=0.8").unwrap();
        let outcomes = vec![
            outcome(&[0.5, 0.7, 0.75]),  // 0: not reached, best 0.75
            outcome(&[0.5, 0.9, 0.9]),   // 1: reached at 10 s
            outcome(&[0.85, 0.85, 0.9]), // 2: reached at 0 s
            Some(Outcome {
                failed: Some("diverged".into()),
                ..outcome(&[0.99, 0.99]).unwrap()
            }), // 3: failed
            outcome(&[0.5, 0.78]),       // 4: not reached, best 0.78
            outcome(&[]),                // 5: no evaluation
        ];
        assert_eq!(
            rank(&t, &[0, 1, 2, 3, 4, 5], &outcomes),
            vec![2, 1, 4, 0, 5, 3]
        );
        let t = Target::parse("loss=0.1").unwrap();
        let o = vec![outcome(&[0.5, 0.3]), outcome(&[0.4, 0.2])];
        assert_eq!(rank(&t, &[0, 1], &o), vec![1, 0]);
    }

    #[test]
    fn a_sample_is_seeded_and_without_repeats() {
        let s = sample(10, 4, 7);
        assert_eq!(s.len(), 4);
        assert_eq!(s, sample(10, 4, 7));
        let mut all = sample(10, 10, 7);
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_ne!(sample(10, 10, 7), sample(10, 10, 8));
    }
}
