//! `linear`: least squares (linfa-linear) on lag features, Wrangler-like: the
//! last `lags` ratios, the last wait, share of the work and spread predict the
//! next ratio. A small ridge penalty (the design matrix augmented with
//! √λ·I rows) keeps the fit defined when features are collinear or constant,
//! as a worker's share of the work usually is.

use linfa::traits::Fit;
use linfa::Dataset;
use linfa_linear::LinearRegression;
use ndarray::{Array1, Array2};

use super::{Predictor, Step, WorkerSeries};

/// Ridge penalty λ.
const RIDGE: f64 = 1e-3;

/// Default number of lagged ratios.
pub const DEFAULT_LAGS: usize = 4;

/// A fitted linear model over lag features.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearLags {
    lags: usize,
    weights: Vec<f64>,
    intercept: f64,
}

/// Why a model could not be fitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FitError {
    /// Too few training windows for the features.
    #[error("{windows} training windows for {features} features; need more history (shorter --lags, more traces or a later --tail-from)")]
    TooFew {
        /// Windows available.
        windows: usize,
        /// Features per window.
        features: usize,
    },
    /// A classifier needs both classes in its training windows.
    #[error("{windows} training windows with {stragglers} stragglers: a classifier needs both stragglers and normal iterations")]
    OneClass {
        /// Windows available.
        windows: usize,
        /// Windows whose next iteration straggled.
        stragglers: usize,
    },
    /// linfa refused the data.
    #[error("linear fit failed: {0}")]
    Linfa(String),
}

/// One training window: the features of the history before a step, and that
/// step.
pub(crate) struct Window {
    /// The step's iteration.
    pub iteration: u64,
    /// Features of the history before it.
    pub x: Vec<f64>,
    /// Its ratio (the target).
    pub next: f64,
}

/// Features per window for `lags` lagged ratios.
pub(crate) fn width(lags: usize) -> usize {
    lags + 3
}

/// Every window of `series` whose step lies in `steps[1..end(s)]` (the rest of
/// each series is held out).
pub(crate) fn windows(
    series: &[WorkerSeries],
    lags: usize,
    end: impl Fn(&WorkerSeries) -> usize,
) -> Vec<Window> {
    series
        .iter()
        .flat_map(|s| {
            (1..end(s).min(s.steps.len())).map(move |t| Window {
                iteration: s.steps[t].iteration,
                x: features(&s.steps[..t], lags),
                next: s.steps[t].ratio,
            })
        })
        .collect()
}

/// The features of the window ending before the step to predict.
pub(crate) fn features(history: &[Step], lags: usize) -> Vec<f64> {
    let last = history.last().copied();
    let mut x: Vec<f64> = (0..lags)
        .map(|k| {
            let i = history.len().saturating_sub(1 + k);
            history.get(i).map_or(1.0, |s| s.ratio)
        })
        .collect();
    x.push(last.map_or(0.0, |s| s.wait_ratio));
    x.push(last.map_or(0.0, |s| s.share));
    x.push(last.map_or(0.0, |s| s.spread));
    x
}

impl LinearLags {
    /// Fits on every window of `series` whose target lies in `steps[1..end(s)]`,
    /// with `end` giving how many steps of each series may be used (the rest is
    /// held out).
    pub fn fit(
        series: &[WorkerSeries],
        lags: usize,
        end: impl Fn(&WorkerSeries) -> usize,
    ) -> Result<Self, FitError> {
        let width = width(lags);
        let windows = windows(series, lags, end);
        let xs: Vec<f64> = windows.iter().flat_map(|w| w.x.iter().copied()).collect();
        let mut ys: Vec<f64> = windows.iter().map(|w| w.next).collect();
        if ys.len() <= width {
            return Err(FitError::TooFew {
                windows: ys.len(),
                features: width,
            });
        }
        // The intercept is the last column (of ones); ridge rows follow the data.
        let n = ys.len();
        let mut design = Vec::with_capacity((n + width + 1) * (width + 1));
        for row in xs.chunks(width) {
            design.extend_from_slice(row);
            design.push(1.0);
        }
        for j in 0..=width {
            design.extend((0..=width).map(|k| if k == j { RIDGE.sqrt() } else { 0.0 }));
            ys.push(0.0);
        }
        let x = Array2::from_shape_vec((n + width + 1, width + 1), design)
            .map_err(|e| FitError::Linfa(e.to_string()))?;
        let model = LinearRegression::new()
            .with_intercept(false)
            .fit(&Dataset::new(x, Array1::from(ys)))
            .map_err(|e| FitError::Linfa(e.to_string()))?;
        let mut weights = model.params().to_vec();
        let intercept = weights.pop().unwrap_or(0.0);
        if !weights.iter().chain([&intercept]).all(|w| w.is_finite()) {
            return Err(FitError::Linfa("non-finite coefficients".into()));
        }
        Ok(Self {
            lags,
            weights,
            intercept,
        })
    }
}

impl Predictor for LinearLags {
    fn name(&self) -> &str {
        "linear"
    }

    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        let mut extended = history.to_vec();
        let mut out = Vec::with_capacity(horizon);
        for _ in 0..horizon {
            let x = features(&extended, self.lags);
            let y = self.intercept + x.iter().zip(&self.weights).map(|(a, b)| a * b).sum::<f64>();
            out.push(y);
            if let Some(&last) = extended.last() {
                extended.push(Step { ratio: y, ..last });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::steps;

    #[test]
    fn learns_an_alternating_pattern_that_last_cannot() {
        // ratio alternates 1, 2, 1, 2, …: next = 3 − previous
        let ratios: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 1.0 } else { 2.0 })
            .collect();
        let series = vec![WorkerSeries {
            worker: 0,
            steps: steps(&ratios),
        }];
        let model = LinearLags::fit(&series, 2, |s| s.steps.len()).expect("fits");
        let p = model.predict(&series[0].steps[..10], 2);
        assert!((p[0] - 1.0).abs() < 0.01, "{p:?}");
        assert!((p[1] - 2.0).abs() < 0.01, "{p:?}");
    }

    #[test]
    fn too_little_history_is_a_clear_error() {
        let series = vec![WorkerSeries {
            worker: 0,
            steps: steps(&[1.0, 1.0, 1.0]),
        }];
        let err = LinearLags::fit(&series, 4, |s| s.steps.len()).unwrap_err();
        assert!(
            err.to_string()
                .contains("2 training windows for 7 features"),
            "{err}"
        );
    }
}
