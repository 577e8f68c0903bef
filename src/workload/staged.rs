//! A model as layers that a pipeline cuts into stages (`[parallel]`): the
//! seam between the pipeline's dataflow and the one model that has layers,
//! the CNN.

use std::ops::Range;

use super::{Draws, Evaluation};
use crate::data::RowSource;
pub use crate::workload::cnn::net::infer::StagePrediction;
pub use crate::workload::cnn::net::stages::{Activation, StageError, StageForward, StageGradient};

/// What a stage's inference on test rows gives.
#[derive(Debug, Clone, PartialEq)]
pub enum StageScores {
    /// The activation at its cut, for the next stage.
    Activation(Activation),
    /// Each row's score and whether its label is the positive class, in
    /// the rows' order: the last stage's.
    Scores(Vec<(f64, bool)>),
}

/// The rows of one micro-batch and what its random draws are keyed by.
#[derive(Clone, Copy)]
pub struct StageBatch<'a> {
    /// Where the rows' values and labels are.
    pub source: &'a dyn RowSource,
    /// The micro-batch's rows, in order.
    pub rows: &'a [u32],
    /// Seed and iteration (dropout masks).
    pub draws: Draws,
}

/// What a pipeline stage needs of a model: each pass is pure, and each
/// parameter's gradient has the bits of the whole model's on the same rows.
pub trait Staged: Send + Sync {
    /// The layers' names, in order.
    fn layer_names(&self) -> &'static [&'static str];

    /// Each layer's forward and backward cost, in any one unit (paced
    /// stages take these shares of the nominal time per row).
    fn layer_costs(&self) -> &'static [(f64, f64)];

    /// The coordinates of the flat parameters that `layers` hold
    /// (contiguous; layer after layer).
    fn layer_params(&self, layers: Range<usize>) -> Range<usize>;

    /// The forward of `layers` on `batch` at `params` (the whole flat
    /// vector; only the layers' coordinates are read), from the rows when
    /// `layers` starts at 0, else from `input`, the stage before's output.
    fn stage_forward(
        &self,
        params: &[f64],
        layers: Range<usize>,
        input: Option<&Activation>,
        batch: StageBatch<'_>,
    ) -> Result<StageForward, StageError>;

    /// The backward of `forward` from `d_output` (None for the last stage).
    fn stage_backward(
        &self,
        forward: StageForward,
        d_output: Option<&Activation>,
    ) -> Result<StageGradient, StageError>;

    /// The test rows in the batches the whole model's evaluation scores
    /// them in; a pipeline's replicas share them out.
    fn test_batches(&self) -> Vec<Vec<u32>>;

    /// The inference of `layers` on the test rows `test.1` of `test.0` at
    /// `params`, from the rows when `layers` starts at 0, else from
    /// `input`: the scores of the whole model's evaluation, bit for bit,
    /// when the stages run one after another.
    fn stage_scores(
        &self,
        params: &[f64],
        layers: Range<usize>,
        input: Option<&Activation>,
        test: (&dyn RowSource, &[u32]),
    ) -> Result<StageScores, StageError>;

    /// The evaluation of every test row's scores, in [`Staged::test_batches`]'
    /// order.
    fn evaluation(&self, scores: &[(f64, bool)]) -> Evaluation;
}
