//! Scoring a predictor on the held-out tail of each worker's series: at every
//! iteration of the tail it sees only the steps before it (no leakage), and its
//! next-iteration prediction is compared with what happened.

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;

use super::{is_straggler, Predictor, Step, WorkerSeries};

/// How well a predictor did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scores {
    /// Predictor.
    pub predictor: String,
    /// Predictions scored.
    pub predictions: usize,
    /// Mean absolute error of the next iteration's time per unit, µs (the
    /// predicted ratio × the previous iteration's median; NaN for a classifier).
    pub mae_us: f64,
    /// Mean absolute percentage error of the same, %.
    pub mape: f64,
    /// Of the predicted stragglers, the share that straggled (NaN: none predicted).
    pub precision: f64,
    /// Of the stragglers, the share predicted (NaN: none happened).
    pub recall: f64,
    /// Harmonic mean of precision and recall (NaN if either is).
    pub f1: f64,
    /// Mean time of one worker's prediction, ns.
    pub latency_ns: f64,
}

/// Where the held-out tail of a series of `len` steps begins: at `tail_from`
/// of it, and never before the second step.
pub fn tail_start(len: usize, tail_from: f64) -> usize {
    ((len as f64 * tail_from).floor() as usize).max(1)
}

/// Scores `predictor` on every worker's iterations from `tail_from` (a share of
/// each series, in [0, 1)) on; a worker needs at least one earlier step.
/// `jobs` holds each job's (trace's) worker series: at each iteration the
/// predictor is asked for all of a job's workers at once, each seeing its own
/// and its peers' steps before that iteration.
pub fn evaluate(
    predictor: &dyn Predictor,
    jobs: &[Vec<WorkerSeries>],
    tail_from: f64,
    threshold: f64,
) -> Scores {
    let (mut abs, mut pct, mut n) = (0.0, 0.0, 0usize);
    let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
    let (mut spent_ns, mut asked) = (0u128, 0usize);
    for job in jobs {
        let starts: Vec<usize> = job
            .iter()
            .map(|s| tail_start(s.steps.len(), tail_from))
            .collect();
        // every iteration in some worker's tail, in order
        let iterations: BTreeSet<u64> = job
            .iter()
            .zip(&starts)
            .flat_map(|(s, &start)| s.steps.iter().skip(start).map(|step| step.iteration))
            .collect();
        for iteration in iterations {
            let histories: Vec<&[Step]> = job
                .iter()
                .map(|s| &s.steps[..s.steps.partition_point(|step| step.iteration < iteration)])
                .collect();
            let scored: Vec<usize> = (0..job.len())
                .filter(|&w| {
                    let t = histories[w].len();
                    t >= starts[w]
                        && job[w]
                            .steps
                            .get(t)
                            .is_some_and(|s| s.iteration == iteration)
                })
                .collect();
            let clock = Instant::now();
            let ratios = predictor.predict_next_all(&histories);
            // A time predictor's call follows from its ratio: predict once.
            let called: Vec<bool> = scored
                .iter()
                .map(|&w| match ratios[w] {
                    Some(r) if predictor.predicts_time() => is_straggler(r, threshold),
                    _ => predictor.calls_straggler(histories[w], threshold),
                })
                .collect();
            spent_ns += clock.elapsed().as_nanos();
            asked += histories.iter().filter(|h| !h.is_empty()).count();
            for (&w, called) in scored.iter().zip(called) {
                let t = histories[w].len();
                let actual = &job[w].steps[t];
                let ratio = ratios[w].unwrap_or(f64::NAN);
                let predicted_us = ratio * histories[w][t - 1].median_us;
                let err = (predicted_us - actual.unit_us).abs();
                abs += err;
                pct += err / actual.unit_us.max(1e-9);
                n += 1;
                match (called, is_straggler(actual.ratio, threshold)) {
                    (true, true) => tp += 1,
                    (true, false) => fp += 1,
                    (false, true) => fn_ += 1,
                    (false, false) => {}
                }
            }
        }
    }
    let share = |a: usize, b: usize| {
        if a + b == 0 {
            f64::NAN
        } else {
            a as f64 / (a + b) as f64
        }
    };
    let precision = share(tp, fp);
    let recall = share(tp, fn_);
    let per = n.max(1) as f64;
    Scores {
        predictor: predictor.name().to_owned(),
        predictions: n,
        mae_us: abs / per,
        mape: 100.0 * pct / per,
        precision,
        recall,
        f1: 2.0 * precision * recall / (precision + recall),
        latency_ns: spent_ns as f64 / asked.max(1) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::{Ewma, Last};

    fn series(worker: u32, ratios: &[f64]) -> WorkerSeries {
        WorkerSeries {
            worker,
            steps: crate::predict::tests::steps(ratios),
        }
    }

    #[test]
    fn a_persistent_straggler_is_caught_by_last_without_false_alarms() {
        let data = vec![series(0, &[1.0; 10]), series(1, &[3.0; 10])];
        let s = evaluate(&Last, &[data], 0.5, 1.5);
        assert_eq!(s.predictions, 10);
        assert_eq!(s.mae_us, 0.0);
        assert_eq!((s.precision, s.recall, s.f1), (1.0, 1.0, 1.0));
    }

    #[test]
    fn errors_are_measured_against_what_happened() {
        // the straggler appears at iteration 5: last misses it once, ewma lags
        let ratios = [1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 3.0];
        let data = vec![series(0, &[1.0; 10]), series(1, &ratios)];
        let last = evaluate(&Last, std::slice::from_ref(&data), 0.5, 1.5);
        assert_eq!(last.predictions, 10);
        assert!(
            (last.mae_us - 20.0).abs() < 1e-9,
            "one miss of 200 µs in 10"
        );
        assert_eq!(last.recall, 0.8);
        assert_eq!(last.precision, 1.0);
        let ewma = evaluate(&Ewma { alpha: 0.3 }, &[data], 0.5, 1.5);
        assert!(ewma.mae_us > last.mae_us);
        let none = evaluate(
            &Last,
            &[vec![series(0, &[1.0; 4]), series(1, &[1.0; 4])]],
            0.5,
            1.5,
        );
        assert!(none.precision.is_nan() && none.recall.is_nan());
    }

    #[test]
    fn every_tail_step_of_every_job_is_scored_once() {
        // two jobs; the second's worker 1 starts late and skips an iteration
        let mut late = series(1, &[1.0, 2.0, 2.0, 2.0, 2.0, 2.0]);
        for (i, s) in late.steps.iter_mut().enumerate() {
            s.iteration = 3 + i as u64 + u64::from(i >= 4);
        }
        let jobs = vec![
            vec![series(0, &[1.0; 10]), series(1, &[3.0; 10])],
            vec![series(0, &[1.0; 10]), late],
        ];
        let s = evaluate(&Last, &jobs, 0.5, 1.5);
        // tails: 5 + 5 steps, then 5 + 3
        assert_eq!(s.predictions, 18);
        // `last` misses only the late worker's first slow step... which lies
        // before its tail: every scored step is predicted exactly
        assert_eq!(s.mae_us, 0.0);
    }
}
