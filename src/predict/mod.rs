//! Straggler prediction: from a worker's recent history, its time per unit in the
//! next iterations (relative to the iteration median), and from that whether it
//! will straggle (slower than `threshold` × the median).
//!
//! Built: the online baselines `last` and `ewma`, `linear` (linfa least
//! squares on lag features), and their evaluation on traces (ours or imported).
//! `svm` (linfa-svm straggler classifier) and `lstm` (burn, DPro-SM's choice).

pub mod auto;
pub mod eval;
pub mod history;
pub mod linear;
pub mod lstm;
pub mod online;
pub mod svm;

pub use auto::Auto;
pub use eval::{evaluate, tail_start, Scores};
pub use history::{worker_series, HistoryError, Step, WorkerSeries};
pub use linear::{FitError, LinearLags, DEFAULT_LAGS};
pub use lstm::{CalibratedLstm, Calibration, LstmError, LstmPredictor, LstmSettings};
pub use online::{OnlineHistory, OnlinePredictor, Timing};
pub use svm::SvmStraggler;

/// Default straggler threshold: slower than 1.5 × the iteration median.
pub const DEFAULT_STRAGGLER_THRESHOLD: f64 = 1.5;

/// Predicts a worker's coming time per unit from its history.
pub trait Predictor {
    /// Name, as on the command line.
    fn name(&self) -> &str;

    /// Time per unit relative to the iteration median for each of the next
    /// `horizon` iterations, from `history` (oldest first, at least one step).
    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64>;

    /// The next iteration's ratio alone ([`Predictor::predict`] with a
    /// horizon of one, without the vector: the online policies ask it of every
    /// worker every iteration).
    fn predict_next(&self, history: &[Step]) -> Option<f64> {
        self.predict(history, 1).first().copied()
    }

    /// Every worker's next ratio at once, from `histories` (one per worker
    /// of one job, each oldest first; an empty one gets `None`). A predictor
    /// that learns from the peers too (`auto`) overrides it.
    fn predict_next_all(&self, histories: &[&[Step]]) -> Vec<Option<f64>> {
        histories
            .iter()
            .map(|h| {
                if h.is_empty() {
                    None
                } else {
                    self.predict_next(h)
                }
            })
            .collect()
    }

    /// Whether [`Predictor::predict`] predicts times (a classifier does not).
    fn predicts_time(&self) -> bool {
        true
    }

    /// Whether the worker will straggle in the next iteration (slower than
    /// `threshold` × the median).
    fn calls_straggler(&self, history: &[Step], threshold: f64) -> bool {
        self.predict(history, 1)
            .first()
            .is_some_and(|&r| is_straggler(r, threshold))
    }
}

/// A shared predictor predicts as the one it shares (so one loaded LSTM can
/// be scored alone and as a candidate of `auto`).
impl<P: Predictor + ?Sized> Predictor for std::sync::Arc<P> {
    fn name(&self) -> &str {
        self.as_ref().name()
    }

    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        self.as_ref().predict(history, horizon)
    }

    fn predict_next(&self, history: &[Step]) -> Option<f64> {
        self.as_ref().predict_next(history)
    }

    fn predict_next_all(&self, histories: &[&[Step]]) -> Vec<Option<f64>> {
        self.as_ref().predict_next_all(histories)
    }

    fn predicts_time(&self) -> bool {
        self.as_ref().predicts_time()
    }

    fn calls_straggler(&self, history: &[Step], threshold: f64) -> bool {
        self.as_ref().calls_straggler(history, threshold)
    }
}

/// The last observed ratio, held.
#[derive(Debug, Clone, Copy, Default)]
pub struct Last;

impl Last {
    fn next(&self, history: &[Step]) -> f64 {
        history.last().map_or(1.0, |s| s.ratio)
    }
}

impl Predictor for Last {
    fn name(&self) -> &str {
        "last"
    }

    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        vec![self.next(history); horizon]
    }

    fn predict_next(&self, history: &[Step]) -> Option<f64> {
        Some(self.next(history))
    }
}

/// `ewma`'s weight of the newest observation wherever none is given: a
/// job's `[predictor] alpha`, `forestall predictor eval --ewma-alpha`, and
/// `auto`'s `ewma` candidate.
///
/// 0.3 rather than 0.5: neither predicts better across traces. Scored by
/// `forestall predictor eval` trace by trace, 0.5 has the lower mean
/// absolute error on the three Alibaba PAI jobs (by 5–11 %) and on
/// synthetic disrupted-machine, 0.3 on ByteDance AR (4 %) and on synthetic
/// slow-worker, power-law and persistent, where it smooths one-iteration
/// spikes more. 0.3 is the weight `auto`'s candidate and the predictor
/// benches were measured with, so keeping it leaves those figures as they
/// are; it changes only jobs that name `ewma` without an `alpha`.
pub const DEFAULT_EWMA_ALPHA: f64 = 0.3;

/// Exponentially weighted moving average of the ratio.
#[derive(Debug, Clone, Copy)]
pub struct Ewma {
    /// Weight of the newest observation, in (0, 1].
    pub alpha: f64,
}

impl Default for Ewma {
    fn default() -> Self {
        Self {
            alpha: DEFAULT_EWMA_ALPHA,
        }
    }
}

impl Ewma {
    fn next(&self, history: &[Step]) -> f64 {
        let mut steps = history.iter();
        let Some(first) = steps.next() else {
            return 1.0;
        };
        steps.fold(first.ratio, |level, s| {
            self.alpha * s.ratio + (1.0 - self.alpha) * level
        })
    }
}

impl Predictor for Ewma {
    fn name(&self) -> &str {
        "ewma"
    }

    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        vec![self.next(history); horizon]
    }

    fn predict_next(&self, history: &[Step]) -> Option<f64> {
        Some(self.next(history))
    }
}

/// The smallest ratio of the last `k` iterations: a slowdown counts only once
/// it has lasted `k` iterations, so a one-off spike (a memoryless straggler)
/// moves nothing, while one that persists is acted on from its `k`-th
/// iteration on. The proactive policies' default (k = 2).
#[derive(Debug, Clone, Copy)]
pub struct Sustained {
    /// Iterations a slowdown must last.
    pub k: usize,
}

impl Default for Sustained {
    fn default() -> Self {
        Self { k: 2 }
    }
}

impl Sustained {
    fn next(&self, history: &[Step]) -> f64 {
        let recent = &history[history.len().saturating_sub(self.k.max(1))..];
        let min = recent.iter().map(|s| s.ratio).fold(f64::INFINITY, f64::min);
        if min.is_finite() {
            min
        } else {
            1.0
        }
    }
}

impl Predictor for Sustained {
    fn name(&self) -> &str {
        "sustained"
    }

    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        vec![self.next(history); horizon]
    }

    fn predict_next(&self, history: &[Step]) -> Option<f64> {
        Some(self.next(history))
    }
}

/// The median ratio of the last `window` iterations: under slowdowns drawn
/// afresh each iteration (power-law, a noisy but steady worker) the best
/// constant guess of the next one for the absolute error `predictor eval`
/// scores; it follows a lasting change once it covers half the window.
#[derive(Debug, Clone, Copy)]
pub struct Median {
    /// Iterations it looks back.
    pub window: usize,
}

/// Iterations `median` looks back when a job does not say.
pub const DEFAULT_MEDIAN_WINDOW: usize = 16;

impl Default for Median {
    fn default() -> Self {
        Self {
            window: DEFAULT_MEDIAN_WINDOW,
        }
    }
}

impl Median {
    fn next(&self, history: &[Step]) -> f64 {
        median_ratio(&history[history.len().saturating_sub(self.window.max(1))..]).unwrap_or(1.0)
    }
}

/// The median of `steps`' finite ratios (the mean of the middle two for an
/// even count); `None` when none is finite.
pub(crate) fn median_ratio(steps: &[Step]) -> Option<f64> {
    let mut ratios: Vec<f64> = steps
        .iter()
        .map(|s| s.ratio)
        .filter(|r| r.is_finite())
        .collect();
    (!ratios.is_empty()).then(|| crate::stats::median(&mut ratios))
}

impl Predictor for Median {
    fn name(&self) -> &str {
        "median"
    }

    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        vec![self.next(history); horizon]
    }

    fn predict_next(&self, history: &[Step]) -> Option<f64> {
        Some(self.next(history))
    }
}

/// Whether a predicted ratio calls the worker a straggler.
pub fn is_straggler(ratio: f64, threshold: f64) -> bool {
    ratio > threshold
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn steps(ratios: &[f64]) -> Vec<Step> {
        ratios
            .iter()
            .enumerate()
            .map(|(i, &ratio)| Step {
                iteration: i as u64,
                unit_us: ratio * 100.0,
                ratio,
                wait_ratio: 0.0,
                share: 0.25,
                median_us: 100.0,
                spread: 0.0,
                workers: 4,
            })
            .collect()
    }

    #[test]
    fn last_holds_the_newest_value() {
        assert_eq!(Last.predict(&steps(&[1.0, 3.0]), 2), vec![3.0, 3.0]);
    }

    #[test]
    fn sustained_ignores_a_one_off_spike() {
        let s = Sustained::default();
        assert_eq!(s.predict(&steps(&[1.0, 1.0, 5.0]), 1), vec![1.0]);
        assert_eq!(s.predict(&steps(&[1.0, 5.0, 4.0]), 2), vec![4.0, 4.0]);
        assert_eq!(s.predict(&steps(&[3.0]), 1), vec![3.0]);
        assert_eq!(s.predict(&[], 1), vec![1.0]);
    }

    #[test]
    fn median_takes_the_middle_of_its_window() {
        let m = Median { window: 4 };
        // spikes are ignored, the window's middle is kept
        assert_eq!(
            m.predict(&steps(&[9.0, 5.0, 1.0, 1.5, 1.0]), 2),
            vec![1.25, 1.25]
        );
        // only the last `window` iterations count
        assert_eq!(
            m.predict_next(&steps(&[9.0, 9.0, 9.0, 1.0, 2.0, 3.0, 2.0])),
            Some(2.0)
        );
        // a lasting slowdown is followed once it fills half the window
        assert_eq!(m.predict_next(&steps(&[1.0, 1.0, 1.0, 4.0])), Some(1.0));
        assert_eq!(
            m.predict_next(&steps(&[1.0, 1.0, 4.0, 4.0, 4.0])),
            Some(4.0)
        );
        // non-finite ratios are left out; nothing known is the median itself
        assert_eq!(m.predict_next(&steps(&[2.0, f64::NAN])), Some(2.0));
        assert_eq!(m.predict(&[], 1), vec![1.0]);
        assert_eq!(
            Median { window: 0 }.predict_next(&steps(&[3.0, 2.0])),
            Some(2.0)
        );
    }

    #[test]
    fn ewma_smooths_toward_the_newest_value() {
        let p = Ewma { alpha: 0.5 }.predict(&steps(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(p, vec![2.5]);
        assert_eq!(Ewma::default().predict(&[], 1), vec![1.0]);
        assert!(is_straggler(1.6, DEFAULT_STRAGGLER_THRESHOLD));
        assert!(!is_straggler(1.5, DEFAULT_STRAGGLER_THRESHOLD));
    }
}
