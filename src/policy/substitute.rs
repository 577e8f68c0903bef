//! `dpro-substitute` (DPro-SM's substitution): which partitions a worker
//! predicted to straggle still computes.
//!
//! At the start of an iteration every worker predicts every worker's time per
//! unit. A worker whose predicted completion time (its own units × its
//! predicted time per unit) is over `threshold` × the lower median of the
//! workers' computes only the first `floor` share of its partitions (at least
//! one, so its speed stays observed); the shard owners use the last reduced
//! gradients of its other units instead (lossy).
//!
//! The decision is a pure function of the predictions and the unit counts, so
//! it is tested here and the worker only applies it.

/// The partitions `worker` keeps this iteration if it is predicted to
/// straggle, `None` if it computes all its units.
///
/// `predicted[w]` is worker `w`'s predicted time per unit (`None`: no
/// prediction), `own_units[w]` its own unit count; `partitions` are `worker`'s
/// partitions in order. Workers without a prediction do not count toward the
/// median, and a worker without one is never called slow. The median is the
/// lower one: with half the workers slow, the upper one is slow too.
pub fn substitution(
    predicted: &[Option<f64>],
    own_units: &[u32],
    partitions: &[u32],
    worker: u32,
    floor: f64,
    threshold: f64,
) -> Option<Vec<u32>> {
    let slow = stragglers(predicted, own_units, threshold);
    slow.get(worker as usize)
        .copied()
        .unwrap_or(false)
        .then(|| kept_partitions(partitions, floor))
}

/// Which workers are predicted to straggle, by worker (see
/// [`substitution`]): a predicted completion time over `threshold` × the
/// lower median of the known ones.
pub fn stragglers(predicted: &[Option<f64>], own_units: &[u32], threshold: f64) -> Vec<bool> {
    let finish = |w: usize| {
        let unit_us = predicted.get(w).copied().flatten()?;
        Some(unit_us * f64::from(*own_units.get(w)?))
    };
    let mut known: Vec<f64> = (0..predicted.len()).filter_map(finish).collect();
    known.sort_by(f64::total_cmp);
    let Some(&median) = known.get(known.len().saturating_sub(1) / 2) else {
        return vec![false; predicted.len()];
    };
    (0..predicted.len())
        .map(|w| finish(w).is_some_and(|mine| median > 0.0 && mine > threshold * median))
        .collect()
}

/// The partitions a straggler keeps: the first `floor` share of
/// `partitions` (at least one).
pub fn kept_partitions(partitions: &[u32], floor: f64) -> Vec<u32> {
    let keep =
        ((partitions.len() as f64 * floor).ceil() as usize).clamp(1, partitions.len().max(1));
    partitions[..keep.min(partitions.len())].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARTITIONS: [u32; 5] = [3, 7, 11, 15, 19];

    fn decide(predicted: &[Option<f64>], own: &[u32], worker: u32) -> Option<Vec<u32>> {
        substitution(predicted, own, &PARTITIONS, worker, 0.1, 1.5)
    }

    #[test]
    fn a_worker_that_is_not_slow_keeps_everything() {
        let t = [Some(100.0); 4];
        for w in 0..4 {
            assert_eq!(decide(&t, &[10; 4], w), None);
        }
        // exactly at the threshold is not over it
        let t = [Some(100.0), Some(100.0), Some(150.0)];
        assert_eq!(decide(&t, &[10; 3], 2), None);
        // fewer units make up for a slower unit time
        let t = [Some(100.0), Some(100.0), Some(300.0)];
        assert_eq!(decide(&t, &[10, 10, 3], 2), None);
    }

    #[test]
    fn a_slow_worker_keeps_the_first_floor_of_its_partitions() {
        let t = [Some(100.0), Some(100.0), Some(100.0), Some(400.0)];
        let own = [10; 4];
        assert_eq!(decide(&t, &own, 3), Some(vec![3]), "ceil(0.5) = 1");
        assert_eq!(decide(&t, &own, 0), None, "the fast ones are not touched");
        let keep = |floor| substitution(&t, &own, &PARTITIONS, 3, floor, 1.5);
        assert_eq!(keep(0.5), Some(vec![3, 7, 11]), "ceil(2.5) = 3");
        assert_eq!(keep(0.0), Some(vec![3]), "at least one");
        assert_eq!(keep(1.0), Some(PARTITIONS.to_vec()));
        // no partitions: nothing to keep, nothing to compute
        assert_eq!(substitution(&t, &own, &[], 3, 0.1, 1.5), Some(vec![]));
    }

    #[test]
    fn unknown_predictions_do_not_count() {
        // no prediction for this worker: it computes everything
        let t = [Some(100.0), Some(100.0), None];
        assert_eq!(decide(&t, &[10; 3], 2), None);
        assert_eq!(decide(&t, &[10; 3], 5), None, "a worker out of range");
        // the others' median is taken over the known ones only
        let t = [None, Some(100.0), Some(400.0)];
        assert_eq!(decide(&t, &[10; 3], 2), Some(vec![3]));
        assert_eq!(decide(&[None; 3], &[10; 3], 0), None);
        // a median of zero calls nobody slow
        assert_eq!(decide(&[Some(100.0); 3], &[0, 0, 10], 2), None);
    }

    #[test]
    fn an_even_count_takes_the_lower_median() {
        // two of four slow: the lower median (1000) makes both stragglers; the
        // upper one (4000) would have called nobody slow
        let t = [Some(100.0), Some(100.0), Some(400.0), Some(400.0)];
        assert_eq!(decide(&t, &[10; 4], 2), Some(vec![3]));
        assert_eq!(decide(&t, &[10; 4], 3), Some(vec![3]));
        assert_eq!(decide(&t, &[10; 4], 1), None);
        // two workers: the faster one is the median
        let t = [Some(100.0), Some(200.0)];
        assert_eq!(decide(&t, &[10; 2], 1), Some(vec![3]));
    }
}
