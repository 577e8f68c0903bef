//! `svm`: Wrangler's choice — a support-vector classifier (linfa-svm, Gaussian
//! kernel) on the same lag features as `linear`, labelling a window by whether
//! the next iteration straggles, with the classes weighted by their rarity. It
//! predicts straggling, not time: its MAE and MAPE are not defined.

use linfa::traits::{Fit, Predict};
use linfa::Dataset;
use linfa_svm::Svm;
use ndarray::{Array1, Array2};

use super::linear::{features, width, windows, FitError, Window};
use super::{is_straggler, Predictor, Step, WorkerSeries};

/// At most this many (most recent) windows train the classifier: SMO's cost
/// grows with the square of the windows.
pub const MAX_WINDOWS: usize = 2000;

/// Width of the Gaussian kernel.
const KERNEL_EPS: f64 = 1.0;

/// A fitted straggler classifier.
pub struct SvmStraggler {
    lags: usize,
    model: Svm<f64, bool>,
}

impl std::fmt::Debug for SvmStraggler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SvmStraggler")
            .field("lags", &self.lags)
            .finish_non_exhaustive()
    }
}

impl SvmStraggler {
    /// Fits on the windows of `series` whose target lies before `end(s)`,
    /// labelled by `threshold`.
    pub fn fit(
        series: &[WorkerSeries],
        lags: usize,
        threshold: f64,
        end: impl Fn(&WorkerSeries) -> usize,
    ) -> Result<Self, FitError> {
        let width = width(lags);
        let mut windows = windows(series, lags, end);
        windows.sort_by_key(|w| w.iteration);
        let keep = windows.len().saturating_sub(MAX_WINDOWS);
        let windows = &windows[keep..];
        let label = |w: &Window| is_straggler(w.next, threshold);
        if windows.len() <= width {
            return Err(FitError::TooFew {
                windows: windows.len(),
                features: width,
            });
        }
        let positives = windows.iter().filter(|w| label(w)).count();
        if positives == 0 || positives == windows.len() {
            return Err(FitError::OneClass {
                windows: windows.len(),
                stragglers: positives,
            });
        }
        let x = Array2::from_shape_vec(
            (windows.len(), width),
            windows.iter().flat_map(|w| w.x.iter().copied()).collect(),
        )
        .map_err(|e| FitError::Linfa(e.to_string()))?;
        let y = Array1::from(windows.iter().map(label).collect::<Vec<bool>>());
        let negatives = windows.len() - positives;
        // Weight each class by the other's size, so the rare stragglers count.
        let c_pos = negatives as f64 / positives as f64;
        let model = Svm::<f64, bool>::params()
            .pos_neg_weights(c_pos.max(1.0), 1.0)
            .gaussian_kernel(KERNEL_EPS)
            .fit(&Dataset::new(x, y))
            .map_err(|e| FitError::Linfa(e.to_string()))?;
        Ok(Self { lags, model })
    }
}

impl Predictor for SvmStraggler {
    fn name(&self) -> &str {
        "svm"
    }

    fn predicts_time(&self) -> bool {
        false
    }

    fn predict(&self, _history: &[Step], horizon: usize) -> Vec<f64> {
        vec![f64::NAN; horizon]
    }

    fn calls_straggler(&self, history: &[Step], _threshold: f64) -> bool {
        self.model
            .predict(Array1::from(features(history, self.lags)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::steps;

    #[test]
    fn learns_which_worker_straggles_next() {
        // worker 1 straggles on every third iteration, right after two calm ones
        let calm = vec![1.0; 60];
        let bursty: Vec<f64> = (0..60)
            .map(|i| if i % 3 == 2 { 3.0 } else { 1.0 })
            .collect();
        let series = vec![
            WorkerSeries {
                worker: 0,
                steps: steps(&calm),
            },
            WorkerSeries {
                worker: 1,
                steps: steps(&bursty),
            },
        ];
        let model = SvmStraggler::fit(&series, 3, 1.5, |s| s.steps.len()).expect("fits");
        assert!(
            model.calls_straggler(&series[1].steps[..32], 1.5),
            "after 1, 1 comes 3"
        );
        assert!(
            !model.calls_straggler(&series[1].steps[..33], 1.5),
            "after 3 comes 1"
        );
        assert!(!model.calls_straggler(&series[0].steps[..30], 1.5));
    }

    #[test]
    fn a_history_without_stragglers_cannot_train_it() {
        let series = vec![WorkerSeries {
            worker: 0,
            steps: steps(&[1.0; 20]),
        }];
        let err = SvmStraggler::fit(&series, 2, 1.5, |s| s.steps.len()).unwrap_err();
        assert!(err.to_string().contains("0 stragglers"), "{err}");
    }
}
