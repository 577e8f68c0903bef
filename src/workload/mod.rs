//! What a job trains: the workloads behind one seam, and the per-coordinate Adam
//! optimiser that shard owners step.
//!
//! The runtime, the policies, the placement, the reduction and the trace writer
//! know a model only through [`Workload`]: its rows (every workload's data is
//! labelled sparse rows, [`Dataset`]), its flat parameter vector, what one unit
//! of rows computes ([`UnitGradient`]: a gradient *sum* and a loss sum), which
//! coordinates the L2 penalty touches, and how parameters score on the test
//! rows ([`Evaluation`]). [`load`] builds the one a [`ModelPlan`] names.
//!
//! Adding a workload means a file here and a line in [`ModelPlan`], [`load`] and
//! `spec` (its `[model] kind`); nothing in `run/`, `policy/` or `trace/`.

pub mod cnn;
pub mod lda;
pub mod logistic;
pub mod mf;
pub mod micro;
pub mod optim;
pub mod softmax;
pub mod staged;
pub mod update;
pub(crate) mod vector;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

pub use logistic::{evaluate, unit_gradient, LogisticRegression};
pub use micro::{micro_batched_gradient, MicroBatches};
pub use optim::{write_into, written, Optimizer, OptimizerConfig, OptimizerKind};
pub use staged::{StageBatch, Staged};
pub use update::Update;

use serde::Serialize;

use crate::data::{DataConfig, DataError, Dataset, RowSource};

/// A unit's contribution: the gradient sum of the loss over its rows and the
/// loss sum itself, both at the parameters the iteration started from.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitGradient {
    /// Σ over rows of ∂loss/∂w: one entry per parameter, or sparse runs over
    /// the parameters the rows touch.
    pub grad: Update,
    /// Σ over rows of the loss.
    pub loss_sum: f64,
}

/// What a unit's random draws are keyed by, besides its rows: the job's seed
/// and the iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Draws {
    /// The job's seed.
    pub seed: u64,
    /// The iteration the unit belongs to.
    pub iteration: u64,
}

/// Test-set quality of a parameter vector.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Evaluation {
    /// Mean loss (log-loss or cross-entropy) on the test rows.
    pub log_loss: f64,
    /// Share of test rows whose predicted class is right.
    pub accuracy: f64,
    /// The workload's own metrics by name (e.g. `auc`), reported as `test_<name>`.
    pub metrics: BTreeMap<String, f64>,
}

impl Evaluation {
    /// An evaluation with no metrics of the workload's own.
    pub fn new(log_loss: f64, accuracy: f64) -> Self {
        Self {
            log_loss,
            accuracy,
            metrics: BTreeMap::new(),
        }
    }
}

/// Everything the runtime needs from a model. Implementations are pure: a
/// unit's result depends only on its rows and the parameters, and every loop
/// runs in a fixed order, so the trained parameters are bit-identical whatever
/// the worker count, placement or policy.
pub trait Workload: Send + Sync + Debug {
    /// The `[model] kind` this workload answers to.
    fn kind(&self) -> &'static str;

    /// The loaded data: rows, labels and the train/test split.
    fn data(&self) -> &Dataset;

    /// Length of the flat parameter vector that the shards split.
    fn param_count(&self) -> usize;

    /// Names of the parameters' blocks in flat order: (name, first coordinate,
    /// length), written to `model.json`.
    fn param_blocks(&self) -> Vec<ParamBlock>;

    /// The parameters every run starts from, a pure function of `seed`.
    fn init_params(&self, seed: u64) -> Vec<f64>;

    /// Whether the L2 penalty applies to `coordinate` (not to biases).
    fn penalised(&self, coordinate: usize) -> bool;

    /// Gradient and loss sums over `rows` of `source` at `params`.
    fn unit_gradient(&self, source: &dyn RowSource, params: &[f64], rows: &[u32]) -> UnitGradient;

    /// A unit's update, for a workload whose units draw random numbers (LDA's
    /// Gibbs sweep): every draw is keyed by `draws` and the rows, never by
    /// who computes the unit. The runtime calls this; the default is
    /// [`Workload::unit_gradient`], which draws nothing.
    fn unit_update(
        &self,
        draws: Draws,
        source: &dyn RowSource,
        params: &[f64],
        rows: &[u32],
    ) -> UnitGradient {
        let _ = draws;
        self.unit_gradient(source, params, rows)
    }

    /// Lines the run's summary adds about the trained `params` (LDA's topics
    /// by their top words); none by default.
    fn describe(&self, params: &[f64]) -> Vec<String> {
        let _ = params;
        Vec::new()
    }

    /// The model as layers a pipeline cuts into stages (`[parallel]`);
    /// None for a model without layers (the default).
    fn staged(&self) -> Option<&dyn Staged> {
        None
    }

    /// Quality of `params` on the test rows.
    fn evaluate(&self, params: &[f64]) -> Evaluation;
}

/// A named block of the flat parameter vector.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ParamBlock {
    /// Name (a feature, a class's weights, a layer's tensor).
    pub name: String,
    /// First coordinate.
    pub offset: usize,
    /// Coordinates.
    pub len: usize,
    /// The tensor's shape, where it is one.
    pub shape: Vec<usize>,
}

/// The model a job trains (`[model] kind`), with its own knobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ModelPlan {
    /// Binary logistic regression on a table's featurised columns.
    Logistic,
    /// Multinomial logistic regression; the label column holds the classes 0..K−1.
    Softmax,
    /// The seeds' CNN (convolutions, then an LSTM over the feature map) on
    /// square grey images from a NumPy `.npz`.
    Cnn {
        /// How the loss weighs the classes against the training set's imbalance.
        class_weighting: ClassWeighting,
        /// Dropout after each max-pooling (0: none; left out of the plan's
        /// JSON, and hash, then).
        #[serde(skip_serializing_if = "is_zero_rate")]
        dropout: f64,
    },
    /// Latent Dirichlet allocation by collapsed Gibbs sampling on a corpus.
    Lda {
        /// Topics K.
        topics: u32,
        /// Prior of a document's topics.
        alpha: f64,
        /// Prior of a topic's words.
        beta: f64,
        /// What a unit sends: deltas under BSP semantics, the tokens' topics
        /// otherwise (chosen from the policy; left out of the plan's JSON,
        /// and hash, when deltas).
        #[serde(skip_serializing_if = "lda::LdaUpdates::is_deltas")]
        updates: lda::LdaUpdates,
    },
    /// Matrix factorisation with biases on a ratings table.
    Mf {
        /// Length of each user's and item's factor row.
        rank: u32,
        /// The per-rating L2 weight λ (charged inside the units' gradients).
        l2: f64,
    },
}

impl ModelPlan {
    /// The kind's name as in job files.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Logistic => "logistic",
            Self::Softmax => "softmax",
            Self::Cnn { .. } => "cnn",
            Self::Mf { .. } => "mf",
            Self::Lda { .. } => "lda",
        }
    }
}

/// How a classifier's loss weighs the classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassWeighting {
    /// Every image weighs 1.
    None,
    /// A class of n_c of the N training images weighs N / (classes · n_c), so
    /// each class carries the same total weight (scikit-learn's "balanced").
    /// Choose it when the training classes are skewed (PneumoniaMNIST's copy here
    /// is 90 % pneumonia).
    Balanced,
}

/// Whether a dropout rate is zero (left out of a plan's JSON).
fn is_zero_rate(rate: &f64) -> bool {
    *rate == 0.0
}

/// Loads `data` and builds the workload `model` names.
pub fn load(model: &ModelPlan, data: &DataConfig) -> Result<Arc<dyn Workload>, DataError> {
    Ok(match model {
        ModelPlan::Logistic => Arc::new(LogisticRegression::load(data)?),
        ModelPlan::Cnn {
            class_weighting,
            dropout,
        } => Arc::new(
            cnn::CnnClassifier::load_config(data, *class_weighting)?.with_dropout(*dropout),
        ),
        ModelPlan::Softmax => Arc::new(softmax::SoftmaxRegression::load(data)?),
        ModelPlan::Lda {
            topics,
            alpha,
            beta,
            updates,
        } => Arc::new(lda::Lda::load(
            data,
            lda::LdaConfig {
                topics: *topics,
                alpha: *alpha,
                beta: *beta,
                updates: *updates,
            },
        )?),
        ModelPlan::Mf { rank, l2 } => Arc::new(mf::MatrixFactorisation::load(data, *rank, *l2)?),
    })
}
