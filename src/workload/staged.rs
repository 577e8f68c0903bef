//! A model as layers that a pipeline cuts into stages (`[parallel]`): the
//! seam between the pipeline's dataflow and the one model that has layers,
//! the CNN.

use std::ops::Range;

use super::Draws;
use crate::data::RowSource;
pub use crate::workload::cnn::net::stages::{Activation, StageError, StageForward, StageGradient};

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
}
