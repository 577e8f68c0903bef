//! The CNN as pipeline stages ([`Staged`]): the net's stage passes over a
//! micro-batch's rows.

use std::ops::Range;

use super::net::stages::{StageInput, LAYERS, LAYER_COSTS};
use super::CnnClassifier;
use crate::workload::staged::{
    Activation, StageBatch, StageError, StageForward, StageGradient, Staged,
};

impl Staged for CnnClassifier {
    fn layer_names(&self) -> &'static [&'static str] {
        &LAYERS
    }

    fn layer_costs(&self) -> &'static [(f64, f64)] {
        &LAYER_COSTS
    }

    fn layer_params(&self, layers: Range<usize>) -> Range<usize> {
        self.net().layer_params(layers)
    }

    fn stage_forward(
        &self,
        params: &[f64],
        layers: Range<usize>,
        input: Option<&Activation>,
        batch: StageBatch<'_>,
    ) -> Result<StageForward, StageError> {
        let (pixels, labels, weights) = self.batch(batch.source, batch.rows);
        let dropout = self.dropout_for(batch.draws, batch.rows);
        let input = match input {
            Some(act) => StageInput::Activation(act),
            None => StageInput::Images(&pixels),
        };
        self.net()
            .stage_forward(params, layers, input, (&labels, &weights, dropout.as_ref()))
    }

    fn stage_backward(
        &self,
        forward: StageForward,
        d_output: Option<&Activation>,
    ) -> Result<StageGradient, StageError> {
        self.net().stage_backward(forward, d_output)
    }
}
