//! The net's inference cut into pipeline stages: the evaluation on the test
//! set that a pipeline runs through its stage workers. A stage runs
//! [`CnnNet::predict`]'s own forward on its layers (no tape, no dropout)
//! and hands on the activation at its cut, so the stages' probabilities
//! have the bits of [`CnnNet::predict`] on the same images, however the
//! layers are cut (the tests check every cut).

use std::ops::Range;

use super::stages::{Activation, StageError, StageInput, LAYERS};
use super::CnnNet;

/// What a stage's inference gives.
#[derive(Debug, Clone, PartialEq)]
pub enum StagePrediction {
    /// The activation at its cut, for the next stage.
    Activation(Activation),
    /// Each image's P(class 1): the last stage's.
    Probabilities(Vec<f32>),
}

impl CnnNet {
    /// The inference of layers `layers` on `n` images at `params`: from
    /// the images when `layers` starts at 0, else from the activation of
    /// the cut before it.
    pub fn stage_predict(
        &self,
        params: &[f64],
        layers: Range<usize>,
        input: StageInput<'_>,
        n: usize,
    ) -> Result<StagePrediction, StageError> {
        self.check_stage_input(layers.clone(), input, n)?;
        let last = layers.end == LAYERS.len();
        let w = self.weights(params)?;
        let forward = self.forward_layers(w, layers, input, n, None);
        Ok(if last {
            StagePrediction::Probabilities(forward.probabilities())
        } else {
            StagePrediction::Activation(
                forward
                    .output
                    .expect("a stage before the head has an output"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{batch, tiny};
    use super::*;
    use crate::workload::cnn::net::CnnConfig;

    /// Every cut's stages, one after another, predict the whole net's bits
    /// (the test net and the PneumoniaMNIST one).
    #[test]
    fn every_cut_predicts_the_whole_nets_bits() {
        for net in [tiny(), CnnNet::new(CnnConfig::pneumonia())] {
            let n = 5;
            let (pixels, _, _) = batch(n, net.config.side);
            predicts_the_whole_nets_bits(&net, &pixels, n);
        }
    }

    fn predicts_the_whole_nets_bits(net: &CnnNet, pixels: &[f32], n: usize) {
        let params = net.init_params(7);
        let whole = net.predict(&params, pixels).expect("predict");
        let layers = LAYERS.len();
        for cut in 1..(1 << (layers - 1)) as u32 {
            let mut bounds = vec![0];
            bounds.extend((1..layers).filter(|l| cut & (1 << (l - 1)) != 0));
            bounds.push(layers);
            let mut act: Option<Activation> = None;
            let mut out = None;
            for w in bounds.windows(2) {
                let input = match &act {
                    Some(a) => StageInput::Activation(a),
                    None => StageInput::Images(pixels),
                };
                match net
                    .stage_predict(&params, w[0]..w[1], input, n)
                    .expect("a stage")
                {
                    StagePrediction::Activation(a) => act = Some(a),
                    StagePrediction::Probabilities(p) => out = Some(p),
                }
            }
            let out = out.expect("the last stage's probabilities");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&whole), "cut at {bounds:?}");
        }
    }

    #[test]
    fn a_stage_refuses_the_wrong_input() {
        let net = tiny();
        let params = net.init_params(1);
        let side = net.config.side;
        let pixels = vec![0.5f32; 2 * side * side];
        let wrong = Activation {
            values: vec![0.0; 6],
            shape: [2, 3],
        };
        assert!(matches!(
            net.stage_predict(&params, 1..5, StageInput::Activation(&wrong), 2),
            Err(StageError::Shape { layer: 1, .. })
        ));
        assert!(matches!(
            net.stage_predict(&params, 1..5, StageInput::Images(&pixels), 2),
            Err(StageError::Input { layer: 1, .. })
        ));
        assert!(matches!(
            net.stage_predict(&params, 0..6, StageInput::Images(&pixels), 2),
            Err(StageError::Layers { .. })
        ));
        assert!(net
            .stage_predict(&params, 0..2, StageInput::Images(&pixels), 2)
            .is_ok());
    }
}
