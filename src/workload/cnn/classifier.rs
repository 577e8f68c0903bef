//! The CNN as a workload (`[model] kind = "cnn"`): binary classification of
//! square grey images, a unit's gradient computed by burn on the calling
//! worker's thread, the loss weighed against class imbalance.

use std::path::Path;

use super::net::{CnnConfig, CnnNet, Dropout};
use crate::data::images::load_images;
use crate::data::{DataConfig, DataError, Dataset, RowSource};
use crate::rng::hash_words;
use crate::workload::ClassWeighting;
use crate::workload::{Draws, Evaluation, ParamBlock, UnitGradient, Workload};

/// Images per forward pass when evaluating.
const EVAL_BATCH: usize = 64;

/// The seeds' CNN on a binary image dataset.
#[derive(Debug)]
pub struct CnnClassifier {
    data: Dataset,
    net: CnnNet,
    side: usize,
    /// Loss weight of class 0 and class 1.
    class_weights: [f32; 2],
    /// Dropout after each max-pooling while training (0: none).
    dropout: f64,
}

/// Keys the dropout masks' generator.
const DROPOUT_STREAM: u64 = 0x4452_4F50; // "DROP"

impl CnnClassifier {
    /// Loads the images of `path` (28 × 28, labels 0/1), evaluating on the
    /// test images, and sets up the net.
    pub fn load(path: &Path, weighting: ClassWeighting) -> Result<Self, DataError> {
        let config = CnnConfig::pneumonia();
        let images = load_images(path, config.side, 2)?;
        Ok(Self::new(images, config, weighting))
    }

    /// Loads the images of `data.path` (28 × 28, labels 0/1) and sets up
    /// the net. With `[data] validation_fraction`, it evaluates on that
    /// share of the training images instead of the test images.
    pub fn load_config(data: &DataConfig, weighting: ClassWeighting) -> Result<Self, DataError> {
        let config = CnnConfig::pneumonia();
        let side = config.side;
        let mut images = load_images(&data.path, side, 2)?;
        if data.validation_fraction.is_some() {
            let train = std::mem::take(&mut images.train);
            (images.train, images.test) = data.validation_slice(train);
        }
        Ok(Self::new(images, config, weighting))
    }

    /// The workload over images already loaded (rows of `side × side` pixels).
    pub fn new(data: Dataset, config: CnnConfig, weighting: ClassWeighting) -> Self {
        let side = config.side;
        let class_weights = match weighting {
            ClassWeighting::None => [1.0, 1.0],
            ClassWeighting::Balanced => {
                let n = data.train.len() as f64;
                let positives = data
                    .train
                    .iter()
                    .filter(|&&r| data.labels[r as usize] == 1.0)
                    .count() as f64;
                let weight = |count: f64| (n / (2.0 * count.max(1.0))) as f32;
                [weight(n - positives), weight(positives)]
            }
        };
        Self {
            data,
            net: CnnNet::new(config),
            side,
            class_weights,
            dropout: 0.0,
        }
    }

    /// The gradient and loss sums of `rows`, with `dropout` if given.
    fn gradient(
        &self,
        source: &dyn RowSource,
        params: &[f64],
        rows: &[u32],
        dropout: Option<&Dropout>,
    ) -> UnitGradient {
        let (pixels, labels, weights) = self.batch(source, rows);
        let g = self
            .net
            .gradient_with(params, &pixels, &labels, &weights, dropout)
            .expect("a unit's batch is built with the net's own image size");
        UnitGradient {
            grad: crate::workload::Update::Dense(g.grad),
            loss_sum: g.loss_sum,
        }
    }

    /// The dropout masks' keys of `rows` in `draws`' iteration (None without
    /// dropout): one key per image, so its mask is the same whoever
    /// computes it, in whichever unit, micro-batch or stage.
    pub fn dropout_for(&self, draws: Draws, rows: &[u32]) -> Option<Dropout> {
        (self.dropout > 0.0).then(|| Dropout {
            rate: self.dropout,
            keys: rows
                .iter()
                .map(|&r| hash_words(&[draws.seed, DROPOUT_STREAM, draws.iteration, u64::from(r)]))
                .collect(),
        })
    }

    /// The same net trained with dropout `rate` after each max-pooling.
    pub fn with_dropout(mut self, rate: f64) -> Self {
        self.dropout = rate;
        self
    }

    /// The loss weight of each class (0, 1).
    pub fn class_weights(&self) -> [f32; 2] {
        self.class_weights
    }

    /// The net.
    pub fn net(&self) -> &CnnNet {
        &self.net
    }

    /// The test rows in the batches an evaluation scores them in.
    pub fn test_batches(&self) -> Vec<Vec<u32>> {
        self.data
            .test
            .chunks(EVAL_BATCH)
            .map(<[u32]>::to_vec)
            .collect()
    }

    /// Dense pixels (f32, image after image), labels and loss weights of `rows`.
    pub fn batch(&self, source: &dyn RowSource, rows: &[u32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let pixels_per_image = self.side * self.side;
        let mut pixels = vec![0.0f32; rows.len() * pixels_per_image];
        let mut labels = Vec::with_capacity(rows.len());
        let mut weights = Vec::with_capacity(rows.len());
        for (i, &r) in rows.iter().enumerate() {
            let (idx, val) = source.row(r);
            let image = &mut pixels[i * pixels_per_image..(i + 1) * pixels_per_image];
            for (&j, &v) in idx.iter().zip(val) {
                image[j as usize] = v as f32;
            }
            let y = source.label(r);
            labels.push(y as f32);
            weights.push(self.class_weights[usize::from(y == 1.0)]);
        }
        (pixels, labels, weights)
    }
}

impl Workload for CnnClassifier {
    fn kind(&self) -> &'static str {
        "cnn"
    }

    fn data(&self) -> &Dataset {
        &self.data
    }

    fn param_count(&self) -> usize {
        self.net.param_count()
    }

    fn param_blocks(&self) -> Vec<ParamBlock> {
        self.net
            .layout()
            .iter()
            .map(|slot| ParamBlock {
                name: slot.name.clone(),
                offset: slot.offset,
                len: slot.shape.iter().product(),
                shape: slot.shape.clone(),
            })
            .collect()
    }

    fn init_params(&self, seed: u64) -> Vec<f64> {
        self.net.init_params(seed)
    }

    fn penalised(&self, coordinate: usize) -> bool {
        // Weights, not biases.
        self.net
            .layout()
            .iter()
            .find(|s| {
                (s.offset..s.offset + s.shape.iter().product::<usize>()).contains(&coordinate)
            })
            .is_some_and(|s| !s.name.ends_with("bias"))
    }

    fn unit_gradient(&self, source: &dyn RowSource, params: &[f64], rows: &[u32]) -> UnitGradient {
        self.gradient(source, params, rows, None)
    }

    fn unit_update(
        &self,
        draws: Draws,
        source: &dyn RowSource,
        params: &[f64],
        rows: &[u32],
    ) -> UnitGradient {
        let dropout = self.dropout_for(draws, rows);
        self.gradient(source, params, rows, dropout.as_ref())
    }

    fn staged(&self) -> Option<&dyn crate::workload::Staged> {
        Some(self)
    }

    fn evaluate(&self, params: &[f64]) -> Evaluation {
        let source = self.data.source();
        let mut scores: Vec<(f64, bool)> = Vec::with_capacity(self.data.test.len());
        for chunk in self.test_batches() {
            let (pixels, labels, _) = self.batch(&source, &chunk);
            let p = self
                .net
                .predict(params, &pixels)
                .expect("a test batch is built with the net's own image size");
            scores.extend(
                p.iter()
                    .zip(&labels)
                    .map(|(&p, &y)| (f64::from(p), y == 1.0)),
            );
        }
        binary_evaluation(&scores)
    }
}

/// Log-loss, accuracy at 0.5 and the area under the ROC curve of predicted
/// probabilities against labels.
pub fn binary_evaluation(scores: &[(f64, bool)]) -> Evaluation {
    let n = scores.len().max(1) as f64;
    let eps = 1e-7;
    let log_loss = scores
        .iter()
        .map(|&(p, y)| {
            let p = p.clamp(eps, 1.0 - eps);
            if y {
                -p.ln()
            } else {
                -(1.0 - p).ln()
            }
        })
        .sum::<f64>()
        / n;
    let right = scores.iter().filter(|&&(p, y)| (p >= 0.5) == y).count();
    let mut evaluation = Evaluation::new(log_loss, right as f64 / n);
    if let Some(auc) = auc(scores) {
        evaluation.metrics.insert("auc".into(), auc);
    }
    // The mean of the two classes' recalls: what accuracy is when the
    // classes are skewed (the training images are 90 % pneumonia, so a
    // validation slice of them rewards predicting pneumonia always).
    let recall = |class: bool| {
        let of: Vec<f64> = scores
            .iter()
            .filter(|s| s.1 == class)
            .map(|s| s.0)
            .collect();
        (!of.is_empty())
            .then(|| of.iter().filter(|&&p| (p >= 0.5) == class).count() as f64 / of.len() as f64)
    };
    if let (Some(negative), Some(positive)) = (recall(false), recall(true)) {
        evaluation
            .metrics
            .insert("balanced_accuracy".into(), (negative + positive) / 2.0);
    }
    evaluation
}

/// The ROC curve's area: the chance that a random positive scores above a
/// random negative (ties count half); `None` without both classes.
pub fn auc(scores: &[(f64, bool)]) -> Option<f64> {
    let mut sorted = scores.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let positives = sorted.iter().filter(|s| s.1).count() as f64;
    let negatives = sorted.len() as f64 - positives;
    if positives == 0.0 || negatives == 0.0 {
        return None;
    }
    // Mann–Whitney U from average ranks over tied groups.
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j < sorted.len() && sorted[j].0 == sorted[i].0 {
            j += 1;
        }
        let average_rank = (i + 1 + j) as f64 / 2.0;
        rank_sum += average_rank * sorted[i..j].iter().filter(|s| s.1).count() as f64;
        i = j;
    }
    Some((rank_sum - positives * (positives + 1.0) / 2.0) / (positives * negatives))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_of_perfect_random_and_tied_scores() {
        let perfect = [(0.1, false), (0.2, false), (0.8, true), (0.9, true)];
        assert_eq!(auc(&perfect), Some(1.0));
        let inverted = [(0.9, false), (0.1, true)];
        assert_eq!(auc(&inverted), Some(0.0));
        let tied = [(0.5, false), (0.5, true)];
        assert_eq!(auc(&tied), Some(0.5));
        assert_eq!(auc(&[(0.3, true)]), None);
        // one of the 2 × 2 pairs out of order
        let mixed = [(0.1, false), (0.6, false), (0.5, true), (0.9, true)];
        assert_eq!(auc(&mixed), Some(0.75));
    }

    #[test]
    fn evaluation_counts_accuracy_at_one_half_and_clamps_the_log() {
        let e = binary_evaluation(&[(1.0, true), (0.0, true), (0.4, false), (0.5, false)]);
        assert_eq!(e.accuracy, 0.5);
        assert_eq!(e.metrics["balanced_accuracy"], 0.5);
        // all predicted positive: accuracy is the positives' share, the
        // balanced accuracy one half
        let e = binary_evaluation(&[(0.9, true), (0.9, true), (0.9, true), (0.9, false)]);
        assert_eq!((e.accuracy, e.metrics["balanced_accuracy"]), (0.75, 0.5));
        assert!(e.log_loss.is_finite());
        assert!(e.metrics.contains_key("auc"));
    }
}
