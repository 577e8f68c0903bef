//! `auto`: a predictor that picks itself, per worker and online. Before each
//! prediction it replays its candidates (`median`, `sustained`, `last`,
//! `ewma`, and `lstm` when a model is given) over the workers' last
//! [`WINDOW`] iterations, each seeing only the steps before the one it
//! predicts, and answers with the one whose error was lowest there (the time
//! per unit, µs, as `predictor eval` scores it), judged over all the job's
//! workers and the same for all of them ([`Auto::choose_all`]). Ties go to
//! the earlier candidate, so with no history yet it behaves as `median`, the
//! best constant guess of a slowdown drawn afresh each iteration. Inside a
//! run the replay is not repeated at every boundary: a [`Scoreboard`] scores
//! each step once as it arrives.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::stats::mean;

use super::{Ewma, Last, LstmPredictor, Median, Predictor, Step, Sustained};

/// Iterations over which the candidates' recent error is measured.
pub const WINDOW: usize = 64;

/// Picks, per call, the candidate with the lowest recent error.
#[derive(Debug, Clone, Default)]
pub struct Auto {
    sustained: Sustained,
    ewma: Ewma,
    median: Median,
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
            Some(&self.median as &dyn Predictor),
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
        self.choose_job(&[history])
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
    /// - **Only on evidence.** A candidate other than the first (`median`) is
    ///   chosen only where, over all the steps, it beat the first by more
    ///   than [`EVIDENCE`] standard errors of the steps' paired differences:
    ///   a lead of a few steps is chance.
    pub fn choose_all(&self, histories: &[&[Step]]) -> Vec<&dyn Predictor> {
        vec![self.choose_job(histories); histories.len()]
    }

    /// The one candidate [`Auto::choose_all`] gives every worker.
    fn choose_job(&self, histories: &[&[Step]]) -> &dyn Predictor {
        let candidates: Vec<&dyn Predictor> = self.candidates().collect();
        let steps: Vec<Vec<f64>> = histories
            .iter()
            .flat_map(|history| step_errors(&candidates, history))
            .collect();
        self.pick(steps.iter().map(Vec::as_slice))
    }

    /// The candidate the candidates' errors at some steps (each step's, by
    /// candidate) point to, as [`Auto::choose_all`] describes.
    fn pick<'s>(&self, steps: impl Iterator<Item = &'s [f64]> + Clone) -> &dyn Predictor {
        let mut best: Option<(f64, &dyn Predictor)> = None;
        for (c, candidate) in self.candidates().enumerate() {
            if c > 0 && !beats_first(steps.clone().map(|e| e[0] - e[c])) {
                continue;
            }
            let error = mean(steps.clone().map(|e| e[c]));
            if best.is_none_or(|(b, _)| error < b) {
                best = Some((error, candidate));
            }
        }
        best.map_or(&self.median as &dyn Predictor, |(_, c)| c)
    }
}

/// `auto` inside a run: each candidate's error at each step, scored once as
/// the step arrives (each candidate predicting it from the steps before), so
/// that choosing at an iteration boundary reads [`WINDOW`] stored errors per
/// worker instead of replaying every candidate over the window. It chooses as
/// [`Auto::choose_all`] does over the same steps; each step is predicted from
/// the up to [`KEPT_STEPS`](super::online::KEPT_STEPS) steps before it (a
/// replay over a kept window sees fewer before its oldest steps).
#[derive(Debug, Clone)]
pub struct Scoreboard {
    auto: Auto,
    /// By worker, its last [`WINDOW`] scored steps, oldest first: the step's
    /// iteration and each candidate's error there.
    scored: Vec<VecDeque<(u64, Vec<f64>)>>,
}

impl Scoreboard {
    /// No steps scored yet, for `workers` workers.
    pub fn new(auto: Auto, workers: usize) -> Self {
        Self {
            auto,
            scored: vec![VecDeque::new(); workers],
        }
    }

    /// Scores `step`, `worker`'s next after `before` (its steps so far).
    pub fn score(&mut self, worker: usize, before: &[Step], step: &Step) {
        let candidates: Vec<&dyn Predictor> = self.auto.candidates().collect();
        let Some(errors) = step_error(&candidates, before, step) else {
            return;
        };
        let Some(scored) = self.scored.get_mut(worker) else {
            return;
        };
        scored.push_back((step.iteration, errors));
        if scored.len() > WINDOW {
            scored.pop_front();
        }
    }

    /// The scores of the steps of iterations up to `iteration` only.
    pub fn through(&self, iteration: u64) -> Self {
        Self {
            auto: self.auto.clone(),
            scored: self
                .scored
                .iter()
                .map(|s| s.iter().filter(|(i, _)| *i <= iteration).cloned().collect())
                .collect(),
        }
    }

    /// The candidate for every worker, from the scores so far.
    pub fn choice(&self) -> &dyn Predictor {
        self.auto
            .pick(self.scored.iter().flatten().map(|(_, e)| e.as_slice()))
    }

    /// Every worker's next ratio from `histories` (by worker), by
    /// [`Scoreboard::choice`].
    pub fn predict_next_all(&self, histories: &[&[Step]]) -> Vec<Option<f64>> {
        self.choice().predict_next_all(histories)
    }
}

/// Standard errors by which a candidate must have beaten the first
/// (`median`). With one, on single 40-iteration runs of our patterns, `auto`
/// left `median` on leads of the head that did not last and scored up to
/// 1.18× its MAE over the tail; with two it stayed within 2 % of the best
/// single predictor on each of them and on the public traces (README,
/// *Online prediction*).
pub const EVIDENCE: f64 = 2.0;

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
        .filter_map(|t| step_error(candidates, &history[..t], &history[t]))
        .collect()
}

/// Each candidate's absolute error of the time per unit at `step`, predicted
/// from `before` (the steps before it); `None` if there are none, or some
/// candidate has no finite error.
fn step_error(candidates: &[&dyn Predictor], before: &[Step], step: &Step) -> Option<Vec<f64>> {
    let median_us = before.last()?.median_us;
    let errors: Vec<f64> = candidates
        .iter()
        .map(|c| {
            c.predict_next(before)
                .map_or(f64::NAN, |ratio| (ratio * median_us - step.unit_us).abs())
        })
        .collect();
    errors.iter().all(|e| e.is_finite()).then_some(errors)
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
        self.choose_job(histories).predict_next_all(histories)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::steps;

    #[test]
    fn follows_whichever_candidate_has_been_right_lately() {
        let auto = Auto::default();
        // nothing to judge by: median
        assert_eq!(auto.choose(&steps(&[1.0])).name(), "median");
        // a worker that slows steadily under noise (+0.1 an iteration, then
        // +0.5, -0.5, 0 in turn): holding the last value or the minimum of
        // two carries the noise, the window's median lags the drift by half
        // the window, the average follows the drift and smooths the noise
        let noise = [0.5, -0.5, 0.0];
        let drift: Vec<f64> = (0..30)
            .map(|i| 1.0 + 0.1 * f64::from(i) + noise[i as usize % 3])
            .collect();
        let drifting = steps(&drift);
        assert_eq!(auto.choose(&drifting).name(), "ewma");
        // its answer is the chosen one's
        assert_eq!(
            auto.predict_next(&drifting),
            Ewma::default().predict_next(&drifting),
            "auto answers as ewma"
        );
    }

    #[test]
    fn a_spike_does_not_fool_it() {
        // one-off spikes every third iteration: median and sustained ignore
        // them, last does not
        let spiky = steps(&[1.0, 1.0, 5.0, 1.0, 1.0, 5.0, 1.0, 1.0, 5.0, 1.0, 1.0, 5.0]);
        let auto = Auto::default();
        assert_ne!(auto.choose(&spiky).name(), "last");
        assert_eq!(auto.predict_next(&spiky), Some(1.0));
    }

    #[test]
    fn peers_lend_their_evidence() {
        let auto = Auto::default();
        // A worker that slows down for good: `last` follows at once, the
        // median of the window only once half of it is slow, but two steps
        // are not evidence...
        let step_up = steps(&[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 4.0, 4.0]);
        assert_eq!(auto.choose(&step_up).name(), "median");
        // ...nor are they with seven steady peers (the choice is the job's)...
        let steady = steps(&[1.0; 11]);
        let mut job: Vec<&[Step]> = vec![&steady; 7];
        job.push(&step_up);
        assert!(auto.choose_all(&job).iter().all(|c| c.name() == "median"));
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

    #[test]
    fn a_scoreboard_chooses_as_the_replay_does() {
        let auto = Auto::default();
        // Dips every third iteration from the start (ewma's), then a lasting
        // slowdown everywhere (last's): the choice changes on the way.
        let mut ratios = [2.0, 2.0, 1.0].repeat(5);
        ratios.extend([4.0; 12]);
        let dips = steps(&ratios);
        let late = steps(&ratios[3..]);
        let job: Vec<&[Step]> = vec![&dips, &dips, &late];
        let mut board = Scoreboard::new(auto.clone(), job.len());
        let mut chosen = std::collections::BTreeSet::new();
        for t in 0..dips.len() {
            for (w, history) in job.iter().enumerate() {
                if let Some(step) = history.get(t) {
                    board.score(w, &history[..t], step);
                }
            }
            let so_far: Vec<&[Step]> = job.iter().map(|h| &h[..h.len().min(t + 1)]).collect();
            assert_eq!(
                board.choice().name(),
                auto.choose_job(&so_far).name(),
                "t = {t}"
            );
            assert_eq!(
                board.predict_next_all(&so_far),
                auto.predict_next_all(&so_far)
            );
            chosen.insert(board.choice().name().to_string());
        }
        assert!(chosen.len() >= 2, "the choice changed: {chosen:?}");
        // The scores through an iteration choose as the replay of the steps
        // up to it.
        let through: Vec<&[Step]> = job.iter().map(|h| &h[..h.len().min(8)]).collect();
        assert_eq!(
            board.through(7).choice().name(),
            auto.choose_job(&through).name()
        );
        // No more than the window is kept.
        assert!(board.scored.iter().all(|s| s.len() <= WINDOW));
        // A worker out of range or with nothing before its step is not scored.
        let mut empty = Scoreboard::new(auto.clone(), 1);
        empty.score(5, &dips[..3], &dips[3]);
        empty.score(0, &[], &dips[0]);
        assert!(empty.scored.iter().all(VecDeque::is_empty));
    }
}
