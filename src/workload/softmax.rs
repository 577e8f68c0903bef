//! Multinomial logistic regression (`[model] kind = "softmax"`): K classes,
//! K × D weights stored class-major (`params[k · D + j]`), the mean
//! cross-entropy plus an L2 penalty on every weight but the classes' biases.

use super::{Evaluation, ParamBlock, UnitGradient, Update, Workload};
use crate::data::{load_dataset_with, DataConfig, DataError, Dataset, LabelKind, RowSource};

/// Softmax regression on a table's featurised rows.
#[derive(Debug, Clone)]
pub struct SoftmaxRegression {
    data: Dataset,
    classes: usize,
}

impl SoftmaxRegression {
    /// Loads and featurises the table `config` names; its label column holds
    /// class numbers 0..K−1 and K is the largest plus one.
    pub fn load(config: &DataConfig) -> Result<Self, DataError> {
        Ok(Self::new(load_dataset_with(config, LabelKind::Classes)?))
    }

    /// The workload over a dataset already loaded (labels are class numbers).
    pub fn new(data: Dataset) -> Self {
        let classes = data.labels.iter().fold(0.0f64, |m, &y| m.max(y)) as usize + 1;
        Self { data, classes }
    }

    /// Number of classes K.
    pub fn classes(&self) -> usize {
        self.classes
    }
}

/// Each class's score of row `r` at `params` (K × D, class-major).
fn scores(idx: &[u32], val: &[f64], params: &[f64], classes: usize, out: &mut [f64]) {
    let dims = params.len() / classes;
    for (k, s) in out.iter_mut().enumerate().take(classes) {
        let w = &params[k * dims..(k + 1) * dims];
        *s = idx.iter().zip(val).map(|(&j, &v)| w[j as usize] * v).sum();
    }
}

/// Turns scores into probabilities in place and returns log Σ e^score.
fn softmax_in_place(s: &mut [f64]) -> f64 {
    let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = s.iter().map(|&x| (x - max).exp()).sum();
    let log_sum = max + sum.ln();
    for x in s.iter_mut() {
        *x = (*x - log_sum).exp();
    }
    log_sum
}

/// Cross-entropy gradient and loss sums over `rows` at `params` (K classes).
pub fn unit_gradient(
    source: &(impl RowSource + ?Sized),
    params: &[f64],
    rows: &[u32],
    classes: usize,
) -> UnitGradient {
    let dims = params.len() / classes;
    let mut grad = vec![0.0; params.len()];
    let mut loss_sum = 0.0;
    let mut s = vec![0.0; classes];
    for &r in rows {
        let (idx, val) = source.row(r);
        let y = source.label(r) as usize;
        scores(idx, val, params, classes, &mut s);
        let true_score = s[y];
        let log_sum = softmax_in_place(&mut s);
        loss_sum += log_sum - true_score;
        for (k, &p) in s.iter().enumerate() {
            let g = p - f64::from(u8::from(k == y));
            let row = &mut grad[k * dims..(k + 1) * dims];
            for (&j, &v) in idx.iter().zip(val) {
                row[j as usize] += g * v;
            }
        }
    }
    UnitGradient {
        grad: Update::Dense(grad),
        loss_sum,
    }
}

/// Mean cross-entropy and accuracy (arg-max class, lowest index on ties) of
/// `params` on `rows`.
pub fn evaluate(
    source: &(impl RowSource + ?Sized),
    params: &[f64],
    rows: &[u32],
    classes: usize,
) -> Evaluation {
    let mut loss = 0.0;
    let mut right = 0usize;
    let mut s = vec![0.0; classes];
    for &r in rows {
        let (idx, val) = source.row(r);
        let y = source.label(r) as usize;
        scores(idx, val, params, classes, &mut s);
        let predicted = (0..classes).fold(0, |best, k| if s[k] > s[best] { k } else { best });
        let true_score = s[y];
        loss += softmax_in_place(&mut s) - true_score;
        right += usize::from(predicted == y);
    }
    let n = rows.len().max(1) as f64;
    Evaluation::new(loss / n, right as f64 / n)
}

impl Workload for SoftmaxRegression {
    fn kind(&self) -> &'static str {
        "softmax"
    }

    fn data(&self) -> &Dataset {
        &self.data
    }

    fn param_count(&self) -> usize {
        self.classes * self.data.dims()
    }

    fn param_blocks(&self) -> Vec<ParamBlock> {
        let dims = self.data.dims();
        (0..self.classes)
            .map(|k| ParamBlock {
                name: format!("class {k}"),
                offset: k * dims,
                len: dims,
                shape: vec![dims],
            })
            .collect()
    }

    fn init_params(&self, _seed: u64) -> Vec<f64> {
        vec![0.0; self.param_count()]
    }

    fn penalised(&self, coordinate: usize) -> bool {
        // feature 0 of every class is its bias
        !coordinate.is_multiple_of(self.data.dims())
    }

    fn unit_gradient(&self, source: &dyn RowSource, params: &[f64], rows: &[u32]) -> UnitGradient {
        unit_gradient(source, params, rows, self.classes)
    }

    fn evaluate(&self, params: &[f64]) -> Evaluation {
        evaluate(&self.data.source(), params, &self.data.test, self.classes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{LabelledRows, SparseRows};

    /// Three rows, features (bias, x), classes 0, 1, 2.
    fn rows() -> (SparseRows, Vec<f64>) {
        (
            SparseRows {
                offsets: vec![0, 2, 4, 6],
                indices: vec![0, 1, 0, 1, 0, 1],
                values: vec![1.0, -1.0, 1.0, 0.2, 1.0, 1.5],
            },
            vec![0.0, 1.0, 2.0],
        )
    }

    #[test]
    fn zero_parameters_cost_ln_k_per_row() {
        let (f, y) = rows();
        let source = LabelledRows {
            features: &f,
            labels: &y,
        };
        let g = unit_gradient(&source, &[0.0; 6], &[0, 1, 2], 3);
        assert!((g.loss_sum - 3.0 * 3f64.ln()).abs() < 1e-12);
        // bias gradient of class k: Σ_r (1/3 − [y_r = k]) = 0 for every class
        for k in 0..3 {
            assert!(g.grad[k * 2].abs() < 1e-12);
        }
        let e = evaluate(&source, &[0.0; 6], &[0, 1, 2], 3);
        assert!((e.log_loss - 3f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let (f, y) = rows();
        let source = LabelledRows {
            features: &f,
            labels: &y,
        };
        let w = [0.1, -0.3, 0.25, 0.5, -0.2, 0.05];
        let g = unit_gradient(&source, &w, &[0, 1, 2], 3);
        for j in 0..6 {
            let h = 1e-6;
            let mut up = w;
            up[j] += h;
            let mut down = w;
            down[j] -= h;
            let fd = (unit_gradient(&source, &up, &[0, 1, 2], 3).loss_sum
                - unit_gradient(&source, &down, &[0, 1, 2], 3).loss_sum)
                / (2.0 * h);
            assert!((fd - g.grad[j]).abs() < 1e-6, "{j}: {fd} vs {}", g.grad[j]);
        }
    }

    #[test]
    fn units_add_up_in_any_split() {
        let (f, y) = rows();
        let source = LabelledRows {
            features: &f,
            labels: &y,
        };
        let w = [0.1, -0.3, 0.25, 0.5, -0.2, 0.05];
        let whole = unit_gradient(&source, &w, &[0, 1, 2], 3);
        let a = unit_gradient(&source, &w, &[0, 2], 3);
        let b = unit_gradient(&source as &dyn RowSource, &w, &[1], 3);
        assert!((a.loss_sum + b.loss_sum - whole.loss_sum).abs() < 1e-12);
        for j in 0..6 {
            assert!((a.grad[j] + b.grad[j] - whole.grad[j]).abs() < 1e-12);
        }
        // every row's class probabilities sum to one, so each feature's
        // gradient summed over the classes is zero
        for j in 0..2 {
            let s: f64 = (0..3).map(|k| whole.grad[k * 2 + j]).sum();
            assert!(s.abs() < 1e-12, "feature {j}: {s}");
        }
    }

    #[test]
    fn huge_scores_stay_finite_and_predict_the_argmax() {
        let (f, y) = rows();
        let source = LabelledRows {
            features: &f,
            labels: &y,
        };
        let w = [800.0, 0.0, -800.0, 0.0, 0.0, 0.0];
        let g = unit_gradient(&source, &w, &[0, 1, 2], 3);
        assert!(g.loss_sum.is_finite() && g.grad.to_dense(6).iter().all(|x| x.is_finite()));
        let e = evaluate(&source, &w, &[0, 1, 2], 3);
        assert!(
            (e.accuracy - 1.0 / 3.0).abs() < 1e-12,
            "only row 0 is class 0"
        );
    }
}
