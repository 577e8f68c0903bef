//! `auto`: a predictor that picks itself, per worker and online. Before each
//! prediction it replays its candidates (`sustained`, `last`, `ewma`, and
//! `lstm` when a model is given) over the worker's last [`WINDOW`] iterations,
//! each seeing only the steps before the one it predicts, and answers with the
//! one whose error was lowest there (the time per unit, µs, as `predictor
//! eval` scores it). Ties go to the earlier candidate, so with no history yet
//! it behaves as `sustained`, the proactive policies' default.

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
        let from = history.len().saturating_sub(WINDOW).max(1);
        let mut best: Option<(f64, &dyn Predictor)> = None;
        for candidate in self.candidates() {
            let error = recent_error(candidate, history, from);
            if best.is_none_or(|(b, _)| error < b) {
                best = Some((error, candidate));
            }
        }
        best.map_or(&self.sustained, |(_, c)| c)
    }
}

/// `predictor`'s mean absolute error of the time per unit over
/// `history[from..]`, each step predicted from those before it (0 when there
/// is no step to judge).
fn recent_error(predictor: &dyn Predictor, history: &[Step], from: usize) -> f64 {
    let mut sum = 0.0;
    let mut n = 0usize;
    for t in from..history.len() {
        let Some(ratio) = predictor.predict_next(&history[..t]) else {
            continue;
        };
        let error = (ratio * history[t - 1].median_us - history[t].unit_us).abs();
        if error.is_finite() {
            sum += error;
            n += 1;
        }
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
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
        // a worker that slows down for good: `last` follows at once
        let step_up = steps(&[1.0, 1.0, 1.0, 1.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]);
        assert_eq!(auto.choose(&step_up).name(), "last");
        // its answer is the chosen one's
        assert_eq!(
            auto.predict_next(&step_up),
            Last.predict_next(&step_up),
            "auto answers as last"
        );
    }

    #[test]
    fn a_spike_does_not_fool_it() {
        // one-off spikes every third iteration: sustained ignores them
        let spiky = steps(&[1.0, 1.0, 5.0, 1.0, 1.0, 5.0, 1.0, 1.0, 5.0, 1.0, 1.0]);
        assert_eq!(Auto::default().choose(&spiky).name(), "sustained");
    }
}
