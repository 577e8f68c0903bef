//! `auto`: a predictor that picks itself, per worker and online. Before each
//! prediction it replays its candidates (`sustained`, `last`, `ewma`, and
//! `lstm` when a model is given) over the workers' last [`WINDOW`] iterations,
//! each seeing only the steps before the one it predicts, and answers with the
//! one whose error was lowest there (the time per unit, µs, as `predictor
//! eval` scores it), judged over all the job's workers and the same for
//! all of them ([`Auto::choose_all`]). Ties go to the earlier candidate, so
//! with no history yet it behaves as `sustained`, the proactive policies'
//! default.

use std::sync::Arc;

use super::{Ewma, Last, LstmPredictor, Predictor, Step, Sustained};

/// Iterations over which the candidates' recent error is measured.
pub const WINDOW: usize = 64;

/// Picks, per call, the candidate with the lowest recent error.
#[derive(Debug, Clone, Default)]
pub struct Auto {
    sustained: Sustained,
    ewma: Ewma,
    lstm: Option<Arc<LstmPredictor>>,
}

impl Auto {
    /// With the LSTM `lstm` among the candidates, if given.
    pub fn new(lstm: Option<Arc<LstmPredictor>>) -> Self {
        Self {
            lstm,
            ..Self::default()
        }
    }

    fn candidates(&self) -> impl Iterator<Item = &dyn Predictor> {
        [
            Some(&self.sustained as &dyn Predictor),
            Some(&Last as &dyn Predictor),
            Some(&self.ewma as &dyn Predictor),
            self.lstm.as_deref().map(|l| l as &dyn Predictor),
        ]
        .into_iter()
        .flatten()
    }

    /// The candidate that would have done best over the last [`WINDOW`] steps
    /// of `history` (the first candidate when there is nothing to judge by).
    pub fn choose(&self, history: &[Step]) -> &dyn Predictor {
        self.choose_all(&[history])[0]
    }

    /// Each worker's candidate, from `histories` (the workers of one job):
    /// the same for every worker, the one with the lowest mean error over
    /// all of the workers' last [`WINDOW`] steps (each step predicted from
    /// those before it).
    ///
    /// - **One for all.** A plan compares the workers' predictions with one
    ///   another, and the candidates read differently (`sustained`, the
    ///   smallest of two ratios, reads low): chosen per worker, a worker told
    ///   by `sustained` would look faster than one told by `last`.
    /// - **Only on evidence.** A candidate other than the first (`sustained`,
    ///   the policies' default) is chosen only where, over all the steps, it
    ///   beat the first by more than [`EVIDENCE`] standard errors of the
    ///   steps' paired differences: a lead of a few steps is chance.
    pub fn choose_all(&self, histories: &[&[Step]]) -> Vec<&dyn Predictor> {
        let candidates: Vec<&dyn Predictor> = self.candidates().collect();
        let steps: Vec<Vec<f64>> = histories
            .iter()
            .flat_map(|history| step_errors(&candidates, history))
            .collect();
        let mut best: Option<(f64, &dyn Predictor)> = None;
        for (c, candidate) in candidates.iter().enumerate() {
            if c > 0 && !beats_first(steps.iter().map(|e| e[0] - e[c])) {
                continue;
            }
            let error = mean(steps.iter().map(|e| e[c]));
            if best.is_none_or(|(b, _)| error < b) {
                best = Some((error, *candidate));
            }
        }
        let chosen = best.map_or(&self.sustained as &dyn Predictor, |(_, c)| c);
        vec![chosen; histories.len()]
    }
}

/// Standard errors by which a candidate must have beaten the first.
pub const EVIDENCE: f64 = 1.0;

/// The mean of `values` (0 for none).
fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Whether paired differences (the first candidate's error minus another's)
/// say the other is better: their mean exceeds [`EVIDENCE`] standard errors.
fn beats_first(differences: impl Iterator<Item = f64>) -> bool {
    let (mut n, mut sum, mut squares) = (0usize, 0.0, 0.0);
    for d in differences {
        n += 1;
        sum += d;
        squares += d * d;
    }
    if n < 2 {
        return false;
    }
    let n_f = n as f64;
    let mean = sum / n_f;
    let variance = ((squares - n_f * mean * mean) / (n_f - 1.0)).max(0.0);
    mean > 0.0 && mean > EVIDENCE * (variance / n_f).sqrt()
}

/// Each candidate's absolute error of the time per unit at each of
/// `history`'s last [`WINDOW`] steps (by step, then by candidate), each step
/// predicted from those before it; steps where some candidate has no finite
/// error are left out, so the candidates are judged on the same steps.
fn step_errors(candidates: &[&dyn Predictor], history: &[Step]) -> Vec<Vec<f64>> {
    let from = history.len().saturating_sub(WINDOW).max(1);
    (from..history.len())
        .filter_map(|t| {
            let errors: Vec<f64> = candidates
                .iter()
                .map(|c| {
                    c.predict_next(&history[..t]).map_or(f64::NAN, |ratio| {
                        (ratio * history[t - 1].median_us - history[t].unit_us).abs()
                    })
                })
                .collect();
            errors.iter().all(|e| e.is_finite()).then_some(errors)
        })
        .collect()
}

impl Predictor for Auto {
    fn name(&self) -> &str {
        "auto"
    }

    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        self.choose(history).predict(history, horizon)
    }

    fn predict_next(&self, history: &[Step]) -> Option<f64> {
        self.choose(history).predict_next(history)
    }

    fn predict_next_all(&self, histories: &[&[Step]]) -> Vec<Option<f64>> {
        self.choose_all(histories)
            .into_iter()
            .zip(histories)
            .map(|(chosen, history)| {
                if history.is_empty() {
                    None
                } else {
                    chosen.predict_next(history)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::steps;

    #[test]
    fn follows_whichever_candidate_has_been_right_lately() {
        let auto = Auto::default();
        // nothing to judge by: sustained
        assert_eq!(auto.choose(&steps(&[1.0])).name(), "sustained");
        // a worker slowed every third iteration: holding the last value is
        // wrong twice a period, the minimum of two is always wrong, the
        // average is off by a little each time
        let dips = steps(&[2.0, 2.0, 1.0, 2.0, 2.0, 1.0, 2.0, 2.0, 1.0, 2.0, 2.0]);
        assert_eq!(auto.choose(&dips).name(), "ewma");
        // its answer is the chosen one's
        assert_eq!(
            auto.predict_next(&dips),
            Ewma::default().predict_next(&dips),
            "auto answers as ewma"
        );
    }

    #[test]
    fn a_spike_does_not_fool_it() {
        // one-off spikes every third iteration: sustained ignores them
        let spiky = steps(&[1.0, 1.0, 5.0, 1.0, 1.0, 5.0, 1.0, 1.0, 5.0, 1.0, 1.0]);
        assert_eq!(Auto::default().choose(&spiky).name(), "sustained");
    }

    #[test]
    fn peers_lend_their_evidence() {
        let auto = Auto::default();
        // A worker that slows down for good: `last` follows a step earlier
        // than `sustained`, but one step is one event, not evidence...
        let step_up = steps(&[1.0, 1.0, 1.0, 1.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]);
        assert_eq!(auto.choose(&step_up).name(), "sustained");
        // ...nor is it with seven steady peers (the choice is the job's)...
        let steady = steps(&[1.0; 10]);
        let mut job: Vec<&[Step]> = vec![&steady; 7];
        job.push(&step_up);
        assert!(auto
            .choose_all(&job)
            .iter()
            .all(|c| c.name() == "sustained"));
        // ...while eight workers that all did it are.
        let all: Vec<&[Step]> = vec![&step_up; 8];
        let chosen = auto.choose_all(&all);
        assert!(chosen.iter().all(|c| c.name() == "last"));
        assert_eq!(
            auto.predict_next_all(&all)[0],
            Last.predict_next(&step_up),
            "auto answers as last"
        );
        // one candidate for all of a job's workers, whatever each alone
        // would favour
        let dips = steps(&[2.0, 2.0, 1.0, 2.0, 2.0, 1.0, 2.0, 2.0, 1.0, 2.0, 2.0]);
        let mut mixed: Vec<&[Step]> = vec![&step_up; 7];
        mixed.push(&dips);
        let chosen = auto.choose_all(&mixed);
        assert!(chosen.iter().all(|c| c.name() == chosen[0].name()));
        // a worker with no history yet is given nothing to predict from
        let fresh: Vec<&[Step]> = vec![&step_up, &[]];
        assert_eq!(auto.predict_next_all(&fresh)[1], None);
    }
}
