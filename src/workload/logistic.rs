//! Logistic regression: per-unit gradient sums and evaluation.
//!
//! The gradient of a unit is a *sum* over its rows; the shard owner divides by the
//! iteration's row count after reducing in partition order. Every loop runs in
//! row order so a unit's result depends only on its rows and the parameters.

use super::{Evaluation, ParamBlock, UnitGradient, Update, Workload};
use crate::data::{load_dataset, DataConfig, DataError, Dataset, RowSource, SparseRows};

/// Binary logistic regression on a table's featurised rows (`[model] kind =
/// "logistic"`): one weight per feature, zeros to start, the bias unpenalised.
#[derive(Debug, Clone)]
pub struct LogisticRegression {
    data: Dataset,
}

impl LogisticRegression {
    /// Loads and featurises the table `config` names.
    pub fn load(config: &DataConfig) -> Result<Self, DataError> {
        Ok(Self::new(load_dataset(config)?))
    }

    /// The workload over a dataset already loaded.
    pub fn new(data: Dataset) -> Self {
        Self { data }
    }
}

impl Workload for LogisticRegression {
    fn kind(&self) -> &'static str {
        "logistic"
    }

    fn data(&self) -> &Dataset {
        &self.data
    }

    fn param_count(&self) -> usize {
        self.data.dims()
    }

    fn param_blocks(&self) -> Vec<ParamBlock> {
        self.data
            .feature_names
            .iter()
            .enumerate()
            .map(|(j, name)| ParamBlock {
                name: name.clone(),
                offset: j,
                len: 1,
                shape: Vec::new(),
            })
            .collect()
    }

    fn init_params(&self, _seed: u64) -> Vec<f64> {
        vec![0.0; self.param_count()]
    }

    fn penalised(&self, coordinate: usize) -> bool {
        coordinate != 0
    }

    fn unit_gradient(&self, source: &dyn RowSource, params: &[f64], rows: &[u32]) -> UnitGradient {
        unit_gradient(source, params, rows)
    }

    fn evaluate(&self, params: &[f64]) -> Evaluation {
        evaluate(&self.data.rows, &self.data.labels, params, &self.data.test)
    }
}

/// `log(1 + e^z)` without overflow.
#[inline]
fn softplus(z: f64) -> f64 {
    if z > 0.0 {
        z + (-z).exp().ln_1p()
    } else {
        z.exp().ln_1p()
    }
}

#[inline]
fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

#[inline]
fn margin(idx: &[u32], val: &[f64], params: &[f64]) -> f64 {
    idx.iter()
        .zip(val)
        .map(|(&i, &v)| params[i as usize] * v)
        .sum()
}

/// Gradient and loss sums of the log-loss over `rows` of `source` at `params`.
pub fn unit_gradient(
    source: &(impl RowSource + ?Sized),
    params: &[f64],
    rows: &[u32],
) -> UnitGradient {
    let mut grad = vec![0.0; params.len()];
    let mut loss_sum = 0.0;
    for &r in rows {
        let (idx, val) = source.row(r);
        let z = margin(idx, val, params);
        let y = source.label(r);
        loss_sum += softplus(z) - y * z;
        let g = sigmoid(z) - y;
        for (&i, &v) in idx.iter().zip(val) {
            grad[i as usize] += g * v;
        }
    }
    UnitGradient {
        grad: Update::Dense(grad),
        loss_sum,
    }
}

/// Mean log-loss and accuracy of `params` on `rows`.
pub fn evaluate(features: &SparseRows, labels: &[f64], params: &[f64], rows: &[u32]) -> Evaluation {
    let mut loss = 0.0;
    let mut right = 0usize;
    for &r in rows {
        let (idx, val) = features.row(r as usize);
        let z = margin(idx, val, params);
        let y = labels[r as usize];
        loss += softplus(z) - y * z;
        if (z >= 0.0) == (y == 1.0) {
            right += 1;
        }
    }
    let n = rows.len().max(1) as f64;
    Evaluation::new(loss / n, right as f64 / n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::LabelledRows;

    fn rows<'a>(features: &'a SparseRows, labels: &'a [f64]) -> LabelledRows<'a> {
        LabelledRows { features, labels }
    }

    /// Two rows, features (bias, x): row 0 = (1, 2) with y = 1, row 1 = (1, -1) with
    /// y = 0. At w = (0, 0) every margin is 0, σ(0) = 0.5 and each row's loss is
    /// ln 2. The gradient sum is (0.5 - 1)·(1, 2) + (0.5 - 0)·(1, -1) = (0, -1.5).
    #[test]
    fn known_answer_at_zero() {
        let f = SparseRows {
            offsets: vec![0, 2, 4],
            indices: vec![0, 1, 0, 1],
            values: vec![1.0, 2.0, 1.0, -1.0],
        };
        let g = unit_gradient(&rows(&f, &[1.0, 0.0]), &[0.0, 0.0], &[0, 1]);
        assert_eq!(g.grad, Update::Dense(vec![0.0, -1.5]));
        assert!((g.loss_sum - 2.0 * std::f64::consts::LN_2).abs() < 1e-15);
        let e = evaluate(&f, &[1.0, 0.0], &[0.0, 1.0], &[0, 1]);
        assert_eq!(e.accuracy, 1.0);
    }

    #[test]
    fn softplus_is_stable_for_large_margins() {
        assert_eq!(softplus(800.0), 800.0);
        assert!(softplus(-800.0) >= 0.0 && softplus(-800.0) < 1e-300);
        assert!((sigmoid(-800.0)).is_finite());
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let f = SparseRows {
            offsets: vec![0, 3, 5, 8],
            indices: vec![0, 1, 2, 0, 2, 0, 1, 2],
            values: vec![1.0, 0.3, -1.2, 1.0, 0.7, 1.0, -2.0, 1.0],
        };
        let y = [1.0, 0.0, 1.0];
        let w = [0.1, -0.4, 0.25];
        let g = unit_gradient(&rows(&f, &y), &w, &[0, 1, 2]);
        for j in 0..3 {
            let h = 1e-6;
            let mut up = w;
            up[j] += h;
            let mut down = w;
            down[j] -= h;
            let fd = (unit_gradient(&rows(&f, &y), &up, &[0, 1, 2]).loss_sum
                - unit_gradient(&rows(&f, &y), &down, &[0, 1, 2]).loss_sum)
                / (2.0 * h);
            assert!(
                (fd - g.grad[j]).abs() < 1e-6,
                "coordinate {j}: {fd} vs {}",
                g.grad[j]
            );
        }
    }
}
