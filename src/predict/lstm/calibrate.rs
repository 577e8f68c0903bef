//! `lstm` as the runs and `predictor eval` use it: the model's change of the
//! ratio, scaled by a gain fitted online to the job's own past.
//!
//! A model extrapolates the dynamics it was trained on. On a cluster whose
//! stragglers behave otherwise (one trained where slow workers recover,
//! reading Alibaba's slowly drifting workers or ByteDance's persistently slow
//! rank) its changes cost more than holding the last value. So the change is
//! scaled by the gain `g` in [0, 1] that would have given the lowest absolute
//! error of the time per unit over the job's recent steps, each predicted
//! from the steps before it: `last + g × (model − last)`. Where the model's
//! changes help, `g` stays near 1; where they hurt, it falls to 0 and the
//! prediction is the last value; in between it keeps the part that helps.
//!
//! The gain is fitted over all of a job's workers at once (their last
//! [`WINDOW`] steps each), like `auto`'s choice, so every worker computes it
//! the same from the same histories; with nothing to fit on it is 1 (the
//! model as trained). Inside a run a [`Calibration`] records each step once
//! as it arrives instead of replaying the model over the window at every
//! boundary, against the prediction it made for that step at the boundary
//! before (so the model runs once per worker and iteration); the same gain
//! either way (tested).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::LstmPredictor;
use crate::predict::{Predictor, Step};

/// Steps per worker the gain is fitted over.
pub const WINDOW: usize = 64;

/// The LSTM with its online gain: the predictor named `lstm`.
#[derive(Debug, Clone)]
pub struct CalibratedLstm {
    model: Arc<LstmPredictor>,
}

impl CalibratedLstm {
    /// Calibrates `model`.
    pub fn new(model: Arc<LstmPredictor>) -> Self {
        Self { model }
    }

    /// The model without the gain.
    pub fn model(&self) -> &Arc<LstmPredictor> {
        &self.model
    }

    /// A calibration fitted on `histories` (one per worker of one job):
    /// each worker's last [`WINDOW`] steps, each predicted from those before.
    pub fn replayed(&self, histories: &[&[Step]]) -> Calibration {
        let mut calibration = Calibration::new(Arc::clone(&self.model), histories.len());
        for (w, history) in histories.iter().enumerate() {
            for t in history.len().saturating_sub(WINDOW).max(1)..history.len() {
                calibration.observe(w, &history[..t], &history[t]);
            }
        }
        calibration
    }
}

impl Predictor for CalibratedLstm {
    fn name(&self) -> &str {
        "lstm"
    }

    /// Calibrated on `history` alone.
    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        let r = self
            .predict_next(history)
            .unwrap_or_else(|| history.last().map_or(1.0, |s| s.ratio));
        vec![r; horizon]
    }

    fn predict_next(&self, history: &[Step]) -> Option<f64> {
        self.predict_next_all(&[history]).pop().flatten()
    }

    fn predict_next_all(&self, histories: &[&[Step]]) -> Vec<Option<f64>> {
        self.replayed(histories).predict_next_all(histories)
    }
}

/// What one step says of the gain: the gain `z` that would have predicted it
/// exactly, and the weight of a miss (µs of error per unit of gain missed).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Evidence {
    iteration: u64,
    weight: f64,
    z: f64,
}

/// The model's recent changes against what happened, by worker.
#[derive(Debug)]
pub struct Calibration {
    model: Arc<LstmPredictor>,
    seen: Vec<VecDeque<Evidence>>,
    /// By worker, the model's last prediction: the step that joins next is
    /// scored against it without running the model again.
    predicted: Mutex<Vec<Option<Predicted>>>,
}

/// A prediction kept for the step it predicts: (the iteration it was made
/// from, the last ratio, the model's next).
type Predicted = (u64, f64, f64);

/// A worker's answer at a boundary: the iteration it predicts from and the
/// model's last and next ratio (none where its output is not finite).
type Answer = (u64, Option<(f64, f64)>);

impl Clone for Calibration {
    fn clone(&self) -> Self {
        Self {
            model: Arc::clone(&self.model),
            seen: self.seen.clone(),
            predicted: Mutex::new(self.kept_predictions().clone()),
        }
    }
}

impl Calibration {
    /// Nothing seen yet, for `workers` workers.
    pub fn new(model: Arc<LstmPredictor>, workers: usize) -> Self {
        Self {
            model,
            seen: vec![VecDeque::new(); workers],
            predicted: Mutex::new(vec![None; workers]),
        }
    }

    fn kept_predictions(&self) -> std::sync::MutexGuard<'_, Vec<Option<Predicted>>> {
        // A panic elsewhere cannot leave a cache of plain numbers half-written.
        self.predicted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The model's last ratio and next one after `before` (`worker`'s
    /// steps): the kept prediction when it was made from the same last step
    /// (the model is deterministic: the same answer), else the model's.
    fn last_and_next(&self, worker: usize, before: &[Step]) -> Option<(f64, f64)> {
        let newest = before.last()?;
        if let Some(Some((at, last, next))) = self.kept_predictions().get(worker).copied() {
            if at == newest.iteration && last == newest.ratio {
                return Some((last, next));
            }
        }
        self.model.last_and_next(before)
    }

    /// Records `step`, `worker`'s next after `before` (its steps so far). At
    /// gain `g` the prediction `m (l + g d)` (the last median times the last
    /// ratio plus `g` times the model's change) misses the step's time per
    /// unit `u` by `m |d| × |g − z|`, with `z = (u / m − l) / d`. A step the
    /// model does not change says nothing of the gain.
    pub fn observe(&mut self, worker: usize, before: &[Step], step: &Step) {
        let Some(m) = before.last().map(|s| s.median_us) else {
            return;
        };
        let Some((last, next)) = self.last_and_next(worker, before) else {
            return;
        };
        let d = next - last;
        let weight = m * d.abs();
        let z = (step.unit_us / m - last) / d;
        if !(weight > 0.0 && weight.is_finite() && z.is_finite()) {
            return;
        }
        let Some(seen) = self.seen.get_mut(worker) else {
            return;
        };
        seen.push_back(Evidence {
            iteration: step.iteration,
            weight,
            z,
        });
        if seen.len() > WINDOW {
            seen.pop_front();
        }
    }

    /// The evidence of the steps of iterations up to `iteration` only.
    pub fn through(&self, iteration: u64) -> Self {
        Self {
            model: Arc::clone(&self.model),
            seen: self
                .seen
                .iter()
                .map(|s| {
                    s.iter()
                        .filter(|e| e.iteration <= iteration)
                        .copied()
                        .collect()
                })
                .collect(),
            predicted: Mutex::new(vec![None; self.seen.len()]),
        }
    }

    /// The gain in [0, 1] with the lowest total error over the steps seen
    /// (their weighted median `z`, clamped), 1 with none.
    pub fn gain(&self) -> f64 {
        let mut evidence: Vec<Evidence> = self.seen.iter().flatten().copied().collect();
        let total: f64 = evidence.iter().map(|e| e.weight).sum();
        if total <= 0.0 {
            return 1.0;
        }
        evidence.sort_by(|a, b| a.z.total_cmp(&b.z));
        let mut below = 0.0;
        for e in &evidence {
            below += e.weight;
            if below >= total / 2.0 {
                return e.z.clamp(0.0, 1.0);
            }
        }
        1.0
    }

    /// Every worker's next ratio from `histories` (by worker): the last
    /// ratio plus the gain times the model's change; the last ratio where
    /// the model has no finite answer, `None` for an empty history.
    pub fn predict_next_all(&self, histories: &[&[Step]]) -> Vec<Option<f64>> {
        let g = self.gain();
        let answers: Vec<Option<Answer>> = histories
            .iter()
            .map(|h| Some((h.last()?.iteration, self.model.last_and_next(h))))
            .collect();
        let mut kept = self.kept_predictions();
        for (slot, answer) in kept.iter_mut().zip(&answers) {
            if let Some((at, Some((last, next)))) = *answer {
                *slot = Some((at, last, next));
            }
        }
        drop(kept);
        answers
            .iter()
            .zip(histories)
            .map(|(answer, h)| {
                let last = h.last()?.ratio;
                Some(match answer {
                    Some((_, Some((l, next)))) => l + g * (next - l),
                    _ => last,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::lstm::tests::{cyclic, fit, quick};
    use crate::predict::{evaluate, Last, WorkerSeries};

    fn with(evidence: &[(f64, f64)]) -> Calibration {
        let mut c = Calibration::new(one_epoch(), 1);
        c.seen[0].extend(evidence.iter().map(|&(weight, z)| Evidence {
            iteration: 0,
            weight,
            z,
        }));
        c
    }

    /// A model trained for one epoch: the gain's arithmetic does not need a good one.
    fn one_epoch() -> Arc<LstmPredictor> {
        let settings = crate::predict::LstmSettings {
            max_epochs: 1,
            ..quick()
        };
        Arc::new(fit(&cyclic(2, 30), &settings))
    }

    #[test]
    fn the_gain_is_the_weighted_median_kept_in_zero_to_one() {
        assert_eq!(with(&[]).gain(), 1.0, "nothing seen: the model as trained");
        let c = with(&[(1.0, -1.0), (1.0, 0.3), (3.0, 0.5), (1.0, 2.0)]);
        assert_eq!(c.gain(), 0.5);
        assert_eq!(with(&[(1.0, 3.0), (1.0, 1.5)]).gain(), 1.0);
        assert_eq!(with(&[(1.0, -3.0), (5.0, -0.5)]).gain(), 0.0);
        // heavy steps decide: one miss of much weight against two light ones
        assert_eq!(with(&[(1.0, 0.0), (1.0, 0.0), (5.0, 0.8)]).gain(), 0.8);
    }

    /// Ratios in runs of ten: 1 for ten iterations, then 2 for ten.
    fn runs(workers: u32, len: usize) -> Vec<WorkerSeries> {
        (0..workers)
            .map(|w| WorkerSeries {
                worker: w,
                steps: crate::predict::tests::steps(
                    &(0..len)
                        .map(|t| {
                            if ((t + 3 * w as usize) / 10).is_multiple_of(2) {
                                1.0
                            } else {
                                2.0
                            }
                        })
                        .collect::<Vec<_>>(),
                ),
            })
            .collect()
    }

    #[test]
    fn where_the_models_changes_help_it_keeps_them() {
        let series = cyclic(4, 60);
        let model = Arc::new(fit(&series, &quick()));
        let lstm = CalibratedLstm::new(Arc::clone(&model));
        let histories: Vec<&[Step]> = series.iter().map(|s| &s.steps[..40]).collect();
        let gain = lstm.replayed(&histories).gain();
        assert!(gain > 0.8, "gain {gain}");
        let jobs = [series];
        let calibrated = evaluate(&lstm, &jobs, 0.5, 1.5);
        let last = evaluate(&Last, &jobs, 0.5, 1.5);
        assert!(
            calibrated.mae_us < 0.5 * last.mae_us,
            "{calibrated:?} {last:?}"
        );
    }

    #[test]
    fn where_the_models_changes_hurt_it_holds_the_last_value() {
        // Trained on a period-3 cycle, the model calls a change after two
        // equal steps; in runs of ten that is wrong eight times in nine.
        let model = Arc::new(fit(&cyclic(4, 60), &quick()));
        let jobs = [runs(4, 80)];
        let histories: Vec<&[Step]> = jobs[0].iter().map(|s| &s.steps[..60]).collect();
        let lstm = CalibratedLstm::new(Arc::clone(&model));
        assert_eq!(lstm.replayed(&histories).gain(), 0.0);
        let raw = evaluate(model.as_ref(), &jobs, 0.5, 1.5);
        let calibrated = evaluate(&lstm, &jobs, 0.5, 1.5);
        let last = evaluate(&Last, &jobs, 0.5, 1.5);
        assert!(raw.mae_us > 1.2 * last.mae_us, "{raw:?} {last:?}");
        assert!(calibrated.mae_us <= last.mae_us, "{calibrated:?} {last:?}");
        assert_eq!(calibrated.predictor, "lstm");
        assert_eq!(raw.predictor, "lstm-uncalibrated");
    }

    #[test]
    fn evidence_is_kept_for_a_window_and_cut_at_an_iteration() {
        let series = cyclic(2, WINDOW + 20);
        let model = one_epoch();
        let histories: Vec<&[Step]> = series.iter().map(|s| s.steps.as_slice()).collect();
        let c = CalibratedLstm::new(model).replayed(&histories);
        assert!(c.seen.iter().all(|s| s.len() <= WINDOW));
        let early = c.through(WINDOW as u64);
        assert!(early
            .seen
            .iter()
            .flatten()
            .all(|e| e.iteration <= WINDOW as u64));
        assert!(early.seen[0].len() < c.seen[0].len());
    }
}
