//! The CNN as pipeline stages ([`Staged`]): the net's stage passes over a
//! micro-batch's rows.

use std::ops::Range;

use super::classifier::binary_evaluation;
use super::net::infer::StagePrediction;
use super::net::stages::{StageInput, LAYERS, LAYER_COSTS};
use super::CnnClassifier;
use crate::data::RowSource;
use crate::workload::staged::{
    Activation, StageBatch, StageError, StageForward, StageGradient, StageScores, Staged,
};
use crate::workload::Evaluation;

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

    fn test_batches(&self) -> Vec<Vec<u32>> {
        self.test_batches()
    }

    fn stage_scores(
        &self,
        params: &[f64],
        layers: Range<usize>,
        input: Option<&Activation>,
        (source, rows): (&dyn RowSource, &[u32]),
    ) -> Result<StageScores, StageError> {
        let (pixels, labels, _) = self.batch(source, rows);
        let input = match input {
            Some(act) => StageInput::Activation(act),
            None => StageInput::Images(&pixels),
        };
        Ok(
            match self
                .net()
                .stage_predict(params, layers, input, rows.len())?
            {
                StagePrediction::Activation(a) => StageScores::Activation(a),
                StagePrediction::Probabilities(p) => StageScores::Scores(
                    p.iter()
                        .zip(&labels)
                        .map(|(&p, &y)| (f64::from(p), y == 1.0))
                        .collect(),
                ),
            },
        )
    }

    fn evaluation(&self, scores: &[(f64, bool)]) -> Evaluation {
        binary_evaluation(scores)
    }
}
