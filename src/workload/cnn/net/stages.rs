//! The net cut into pipeline stages (ConvLSTM-D-Accel's model-parallel
//! mode): its layers in order are [`LAYERS`] (a convolution with its
//! pooling and dropout, the LSTM, the head), and a stage holds a range of
//! them. A stage runs the forward of its layers on a micro-batch, from the
//! images or from the activation the stage before sent
//! ([`CnnNet::stage_forward`]), keeps what its backward needs
//! ([`StageForward`]), and later runs that backward on the activation
//! gradient the stage after sent ([`CnnNet::stage_backward`]): the gradient
//! of its layers' parameters and of its input, for the stage before.
//!
//! Each parameter's gradient has the bits of [`CnnNet::gradient_with`] on
//! the same micro-batch, however the layers are cut: the whole net's
//! backward reaches a cut through the same operations in the same order
//! (every activation that crosses a cut has one reader), and a stage
//! resumes it from the activation gradient through `Σ a ⊙ ∂L/∂a`, whose
//! gradient is `∂L/∂a` exactly. The tests check it for every cut.

use std::ops::Range;

use burn::optim::GradientsParams;
use burn::tensor::activation::sigmoid;
use burn::tensor::{Device, Tensor, TensorData};

use super::conv::Gathers;
use super::lstm::LstmTape;
use super::{first_rows, weighted_bce_sum, CnnError, CnnNet, Dropout, Net, Reader, CONVOLUTIONS};

/// The net's layers in order, by the names a cut and the parameters'
/// layout use.
pub const LAYERS: [&str; 5] = ["conv1", "conv2", "conv3", "lstm", "head"];

/// Each layer's forward and backward cost, ms per image, as
/// `benches/cnn_layers.rs` measured them on one core (run
/// `2026-11-27-vm-cnn-layers`): what the default cut into stages evens out.
/// Only their ratios matter.
pub const LAYER_COSTS: [(f64, f64); 5] = [
    (0.2383, 0.0878),
    (0.5279, 1.1234),
    (0.4245, 0.8439),
    (0.3325, 0.3012),
    (0.0126, 0.0118),
];

/// The LSTM's index in [`LAYERS`].
const LSTM: usize = CONVOLUTIONS;
/// The head's index in [`LAYERS`].
const HEAD: usize = CONVOLUTIONS + 1;

/// Values that cross a cut, as computed (f32, row-major).
#[derive(Debug, Clone, PartialEq)]
pub struct Activation {
    /// `shape[0] × shape[1]` values.
    pub values: Vec<f32>,
    /// Rows × columns: after a convolution, one row per position of each
    /// image (positions row-major, images inside) and one column per
    /// filter; after the LSTM, one row per image and one column per
    /// hidden unit.
    pub shape: [usize; 2],
}

impl Activation {
    pub(super) fn of(t: &Tensor<2>) -> Self {
        Self {
            values: t
                .clone()
                .into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .expect("converted to f32"),
            shape: t.dims(),
        }
    }

    pub(super) fn tensor(&self, device: &Device) -> Tensor<2> {
        Tensor::<2>::from_data(TensorData::new(self.values.clone(), self.shape), device)
    }

    /// Bytes of its values (what a send of it moves, without framing).
    pub fn bytes(&self) -> usize {
        self.values.len() * std::mem::size_of::<f32>()
    }
}

/// Where a stage's forward begins.
#[derive(Debug, Clone, Copy)]
pub enum StageInput<'a> {
    /// The micro-batch's images (`[n · side · side]`): the first stage.
    Images(&'a [f32]),
    /// The activation the stage before sent.
    Activation(&'a Activation),
}

/// A micro-batch's forward through a stage, kept for its backward.
pub struct StageForward {
    /// What the stage sends the next one; None for the last stage, whose
    /// forward ends in the loss.
    pub output: Option<Activation>,
    /// Σ_i w_i · BCE_i of the micro-batch, from the last stage.
    pub loss_sum: Option<f64>,
    tape: Tape,
}

/// What a stage's backward needs of its forward.
struct Tape {
    layers: Range<usize>,
    /// The module the graph was built on (its parameters' ids).
    net: Net,
    device: Device,
    /// The input as a leaf whose gradient is kept (a stage after the first
    /// that begins with a convolution or the LSTM).
    leaf: Option<Tensor<2>>,
    /// The output, when it is the last convolution's rows of the stage.
    conv_out: Option<Tensor<2>>,
    /// The LSTM's input products and its recurrence.
    lstm: Option<(Tensor<2>, Tensor<2>, LstmTape)>,
    /// The head's input `h` (plain) and, with it, the loss's `z`, `y`, `w`.
    head: Option<HeadTape>,
    /// A head-only stage's input `h` (plain): its gradient is computed.
    h_in: bool,
}

struct HeadTape {
    h: Tensor<2>,
    z: Tensor<2>,
    y: Tensor<2>,
    w: Tensor<2>,
}

/// A micro-batch's backward through a stage.
#[derive(Debug, Clone, PartialEq)]
pub struct StageGradient {
    /// The gradient of the stage's parameters, the coordinates
    /// [`CnnNet::layer_params`] gives for its layers, in layout order.
    pub grad: Vec<f64>,
    /// The gradient of its input, for the stage before (None for the
    /// first stage).
    pub d_input: Option<Activation>,
}

/// A cut the net does not have, or an activation that does not fit it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// The layers are empty or reach past the head.
    #[error("a stage holds layers {start}..{end} of the net's {layers} (conv1, conv2, conv3, lstm, head)")]
    Layers {
        /// First layer.
        start: usize,
        /// One past the last.
        end: usize,
        /// The net's.
        layers: usize,
    },
    /// The first stage gets images, the others an activation.
    #[error("the stage beginning at layer {layer} needs {needs}")]
    Input {
        /// The stage's first layer.
        layer: usize,
        /// What it needs.
        needs: &'static str,
    },
    /// An activation (or its gradient) of another shape than the cut's.
    #[error("an activation of shape {found:?} at the cut before layer {layer}, which passes {expected:?}")]
    Shape {
        /// The layer after the cut.
        layer: usize,
        /// Its shape.
        expected: [usize; 2],
        /// Given.
        found: [usize; 2],
    },
    /// The micro-batch itself.
    #[error(transparent)]
    Batch(#[from] CnnError),
}

impl CnnNet {
    /// The coordinates of the flat parameter vector that layers `layers`
    /// hold (contiguous: the layout is layer after layer).
    pub fn layer_params(&self, layers: Range<usize>) -> Range<usize> {
        let of = |layer: usize| {
            let prefix = format!("{}.", LAYERS[layer]);
            self.layout
                .iter()
                .filter(|slot| slot.name.starts_with(&prefix))
                .map(|slot| slot.offset..slot.offset + slot.shape.iter().product::<usize>())
                .fold(None::<Range<usize>>, |acc, r| match acc {
                    None => Some(r),
                    Some(a) => Some(a.start.min(r.start)..a.end.max(r.end)),
                })
                .unwrap_or(0..0)
        };
        match (layers.start < layers.end).then(|| (of(layers.start), of(layers.end - 1))) {
            Some((first, last)) => first.start..last.end,
            None => 0..0,
        }
    }

    /// The shape of what crosses the cut before layer `layer` (1 to 4) for
    /// `n` images.
    pub fn cut_shape(&self, layer: usize, n: usize) -> [usize; 2] {
        let c = &self.config;
        if layer > LSTM {
            return [n, c.lstm_hidden];
        }
        let side = (0..layer).fold(c.side, |s, l| if c.pool_after[l] { s / 2 } else { s });
        [side * side * n, c.filters[layer - 1]]
    }

    /// Whether `input` is what a stage of `layers` reads for `n` images:
    /// the images from layer 0, else the activation of the cut before, of
    /// the cut's shape.
    pub(super) fn check_stage_input(
        &self,
        layers: Range<usize>,
        input: StageInput<'_>,
        n: usize,
    ) -> Result<(), StageError> {
        let (a, b) = (layers.start, layers.end);
        if a >= b || b > LAYERS.len() {
            return Err(StageError::Layers {
                start: a,
                end: b,
                layers: LAYERS.len(),
            });
        }
        if n == 0 {
            return Err(StageError::Input {
                layer: a,
                needs: "at least one image",
            });
        }
        match input {
            StageInput::Images(pixels) if a == 0 => Ok(self.check(pixels.len(), n, n)?),
            StageInput::Activation(act) if a > 0 => {
                let expected = self.cut_shape(a, n);
                if act.shape != expected || act.values.len() != expected[0] * expected[1] {
                    return Err(StageError::Shape {
                        layer: a,
                        expected,
                        found: act.shape,
                    });
                }
                Ok(())
            }
            _ => Err(StageError::Input {
                layer: a,
                needs: if a == 0 {
                    "the micro-batch's images"
                } else {
                    "the activation of the stage before"
                },
            }),
        }
    }

    /// The forward of layers `layers` on a micro-batch of `labels.len()`
    /// images (`weights` beside them, `dropout` keyed per image): from the
    /// images when `layers` starts at 0, else from the activation of the
    /// cut before it.
    pub fn stage_forward(
        &self,
        params: &[f64],
        layers: Range<usize>,
        input: StageInput<'_>,
        (labels, weights, dropout): (&[f32], &[f32], Option<&Dropout>),
    ) -> Result<StageForward, StageError> {
        let n = labels.len();
        self.check_stage_input(layers.clone(), input, n)?;
        self.check(n * self.config.side * self.config.side, n, weights.len())?;
        if let Some(d) = dropout.filter(|d| d.keys.len() != n) {
            return Err(CnnError::DropoutKeys {
                keys: d.keys.len(),
                images: n,
            }
            .into());
        }
        Ok(self.with_module(params, true, |net, device| {
            self.forward_layers(
                net,
                device,
                layers.clone(),
                input,
                (labels, weights, dropout),
            )
        })?)
    }

    fn forward_layers(
        &self,
        net: &Net,
        device: &Device,
        layers: Range<usize>,
        input: StageInput<'_>,
        (labels, weights, dropout): (&[f32], &[f32], Option<&Dropout>),
    ) -> StageForward {
        let (a, b) = (layers.start, layers.end);
        let n = labels.len();
        let config = &self.config;
        let gathers = Gathers::of(config, n, device);
        let mut leaf = None;
        let mut h_in = None;
        let mut x = match input {
            StageInput::Images(pixels) => {
                Some(first_rows(self.images(pixels, n, device), &gathers, config))
            }
            StageInput::Activation(act) if a <= LSTM => {
                let t = act.tensor(device).require_grad();
                leaf = Some(t.clone());
                Some(t)
            }
            StageInput::Activation(act) => {
                h_in = Some(act.tensor(&device.clone().inner()));
                None
            }
        };
        let mut s = (0..a.min(CONVOLUTIONS)).fold(config.side, |s, l| {
            if config.pool_after[l] {
                s / 2
            } else {
                s
            }
        });
        for layer in a..b.min(CONVOLUTIONS) {
            let (out, side) = net.convolve(
                layer,
                x.take().expect("rows"),
                s,
                (&gathers, config, dropout),
            );
            (x, s) = (Some(out), side);
        }
        let mut output = None;
        let mut conv_out = None;
        if b <= CONVOLUTIONS {
            let out = x.take().expect("rows");
            output = Some(Activation::of(&out));
            conv_out = Some(out);
        }
        let mut lstm = None;
        let mut h = h_in.clone();
        if a <= LSTM && b > LSTM {
            let (z_x, w_h) = net.lstm_input(x.take().expect("rows"));
            let tape = LstmTape::forward(z_x.clone().inner(), w_h.clone().inner(), s * s, n);
            h = Some(tape.last_hidden());
            lstm = Some((z_x, w_h, tape));
        }
        if b == HEAD {
            output = h.as_ref().map(Activation::of);
        }
        let (mut head, mut loss_sum) = (None, None);
        if b > HEAD {
            let h = h.expect("the LSTM's output or the stage's input");
            let (head_w, head_b) = head_params(net);
            let z = h.clone().matmul(head_w.inner()) + head_b.inner().unsqueeze_dim::<2>(0); // [n, 1]
            let plain = device.clone().inner();
            let y = Tensor::<2>::from_data(TensorData::new(labels.to_vec(), [n, 1]), &plain);
            let w = Tensor::<2>::from_data(TensorData::new(weights.to_vec(), [n, 1]), &plain);
            let loss = weighted_bce_sum(z.clone(), y.clone(), w.clone());
            loss_sum = Some(f64::from(
                loss.into_data()
                    .convert::<f32>()
                    .as_slice::<f32>()
                    .expect("converted to f32")[0],
            ));
            head = Some(HeadTape { h, z, y, w });
        }
        StageForward {
            output,
            loss_sum,
            tape: Tape {
                layers,
                net: net.clone(),
                device: device.clone(),
                leaf,
                conv_out,
                lstm,
                head,
                h_in: h_in.is_some(),
            },
        }
    }

    /// The backward of a stage's `forward`, from `d_output`, the gradient
    /// of its output the stage after sent (None for the last stage).
    pub fn stage_backward(
        &self,
        forward: StageForward,
        d_output: Option<&Activation>,
    ) -> Result<StageGradient, StageError> {
        let t = forward.tape;
        let (a, b) = (t.layers.start, t.layers.end);
        let plain = t.device.clone().inner();
        let d_out = match (b > HEAD, d_output, &forward.output) {
            (true, _, _) => None,
            (false, Some(d), Some(out))
                if d.shape == out.shape && d.values.len() == out.values.len() =>
            {
                Some(d.tensor(if b > LSTM { &plain } else { &t.device }))
            }
            (false, d, out) => {
                return Err(StageError::Shape {
                    layer: b,
                    expected: out.as_ref().map_or([0, 0], |o| o.shape),
                    found: d.map_or([0, 0], |d| d.shape),
                })
            }
        };
        let mut terms: Vec<Tensor<1>> = Vec::new();
        // ∂L/∂h, plain: from the head, or from the stage after the LSTM
        let mut d_h = None;
        if let Some(head) = &t.head {
            let (head_w, head_b) = head_params(&t.net);
            let d_z = (sigmoid(head.z.clone()) - head.y.clone()) * head.w.clone(); // [n, 1]
            let d_head_w = head.h.clone().transpose().matmul(d_z.clone()); // [hidden, 1]
            let d_head_b = d_z.clone().sum_dim(0).reshape([1]);
            d_h = Some(d_z.matmul(head_w.clone().inner().transpose())); // [n, hidden]
            terms.push((head_w * Tensor::from_inner(d_head_w)).sum());
            terms.push((head_b * Tensor::from_inner(d_head_b)).sum());
        } else if b == HEAD {
            d_h = d_out.clone();
        }
        if let Some((z_x, w_h, tape)) = &t.lstm {
            let (d_z_x, d_w_h) = tape.backward(d_h.take().expect("∂L/∂h"));
            terms.insert(0, (w_h.clone() * Tensor::from_inner(d_w_h)).sum());
            terms.insert(0, (z_x.clone() * Tensor::from_inner(d_z_x)).sum());
        }
        if let (Some(out), Some(d)) = (&t.conv_out, &d_out) {
            terms.push((out.clone() * d.clone()).sum());
        }
        let mut d_input = None;
        if t.h_in {
            // a head-only stage: its input's gradient is the head's ∂L/∂h
            d_input = d_h.as_ref().map(Activation::of);
        }
        let surrogate = terms
            .into_iter()
            .reduce(|s, term| s + term)
            .expect("every stage holds parameters");
        let mut grads = surrogate.backward();
        if let Some(leaf) = &t.leaf {
            d_input = leaf.grad_remove(&mut grads).map(|g| Activation::of(&g));
        }
        let grads = GradientsParams::from_grads(grads, &t.net);
        let mut reader = Reader::new(Some(grads), self.count);
        burn::module::Module::visit(&t.net, &mut reader);
        let range = self.layer_params(a..b);
        Ok(StageGradient {
            grad: reader.values[range].to_vec(),
            d_input,
        })
    }
}

/// The head's weight `[hidden, 1]` and bias `[1]`.
fn head_params(net: &Net) -> (Tensor<2>, Tensor<1>) {
    let w = net.head.weight.val();
    let b = net
        .head
        .bias
        .as_ref()
        .map(|b| b.val())
        .expect("the net's head has a bias");
    (w, b)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{batch, tiny};
    use super::*;

    /// Every way to cut the 5 layers into stages (each a list of ranges).
    fn cuts() -> Vec<Vec<Range<usize>>> {
        (0u32..1 << (LAYERS.len() - 1))
            .map(|mask| {
                let mut stages = Vec::new();
                let mut start = 0;
                for cut in 1..LAYERS.len() {
                    if mask & (1 << (cut - 1)) != 0 {
                        stages.push(start..cut);
                        start = cut;
                    }
                }
                stages.push(start..LAYERS.len());
                stages
            })
            .collect()
    }

    /// Forward through `stages` in order, backward in reverse: the whole
    /// gradient, the loss and the bytes that crossed the cuts.
    fn pipelined(
        net: &CnnNet,
        params: &[f64],
        stages: &[Range<usize>],
        (pixels, labels, weights): (&[f32], &[f32], &[f32]),
        dropout: Option<&Dropout>,
    ) -> (Vec<f64>, f64) {
        let mut kept = Vec::new();
        let mut act: Option<Activation> = None;
        let mut loss = None;
        for layers in stages {
            let input = match &act {
                None => StageInput::Images(pixels),
                Some(a) => StageInput::Activation(a),
            };
            let f = net
                .stage_forward(params, layers.clone(), input, (labels, weights, dropout))
                .expect("forward");
            act = f.output.clone();
            loss = loss.or(f.loss_sum);
            kept.push((layers.clone(), f));
        }
        let mut grad = vec![0.0; net.param_count()];
        let mut d: Option<Activation> = None;
        for (layers, f) in kept.into_iter().rev() {
            let g = net.stage_backward(f, d.as_ref()).expect("backward");
            grad[net.layer_params(layers.clone())].copy_from_slice(&g.grad);
            assert_eq!(g.d_input.is_some(), layers.start > 0, "{layers:?}");
            d = g.d_input;
        }
        (grad, loss.expect("the last stage's loss"))
    }

    #[test]
    fn every_cut_gives_the_whole_nets_bits() {
        let net = tiny();
        let params = net.init_params(5);
        let (pixels, labels, weights) = batch(3, 8);
        let dropout = Dropout {
            rate: 0.25,
            keys: vec![11, 12, 13],
        };
        for dropout in [None, Some(&dropout)] {
            let whole = net
                .gradient_with(&params, &pixels, &labels, &weights, dropout)
                .expect("whole");
            for stages in cuts() {
                let (grad, loss) = pipelined(
                    &net,
                    &params,
                    &stages,
                    (&pixels, &labels, &weights),
                    dropout,
                );
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&grad), bits(&whole.grad), "{stages:?} {dropout:?}");
                assert_eq!(loss.to_bits(), whole.loss_sum.to_bits(), "{stages:?}");
            }
        }
    }

    #[test]
    fn the_layers_parameters_tile_the_vector_and_cuts_have_their_shapes() {
        let net = tiny();
        let mut end = 0;
        for layer in 0..LAYERS.len() {
            let r = net.layer_params(layer..layer + 1);
            assert_eq!(r.start, end, "{layer}");
            assert!(r.end > r.start, "{layer}");
            end = r.end;
        }
        assert_eq!(end, net.param_count());
        assert_eq!(net.layer_params(0..5), 0..net.param_count());
        // 8 × 8 → pool → 4 × 4 (2 filters) → pool → 2 × 2 (3) → 2 × 2 (4) → h (3)
        let shapes: Vec<[usize; 2]> = (1..LAYERS.len()).map(|l| net.cut_shape(l, 5)).collect();
        assert_eq!(shapes, [[16 * 5, 2], [4 * 5, 3], [4 * 5, 4], [5, 3]]);
    }

    #[test]
    fn bad_stages_and_inputs_are_refused() {
        let net = tiny();
        let params = net.init_params(5);
        let (pixels, labels, weights) = batch(2, 8);
        let b = (&labels[..], &weights[..], None);
        let images = StageInput::Images(&pixels);
        for layers in [0..0, Range { start: 2, end: 1 }, 3..6] {
            let err = net.stage_forward(&params, layers, images, b).err();
            assert!(matches!(err, Some(StageError::Layers { .. })), "{err:?}");
        }
        let act = Activation {
            values: vec![0.0; 16 * 2 * 2],
            shape: [32, 2],
        };
        // images to a later stage, an activation to the first
        let err = net.stage_forward(&params, 1..5, images, b).err();
        assert!(
            matches!(err, Some(StageError::Input { layer: 1, .. })),
            "{err:?}"
        );
        let err = net
            .stage_forward(&params, 0..5, StageInput::Activation(&act), b)
            .err();
        assert!(
            matches!(err, Some(StageError::Input { layer: 0, .. })),
            "{err:?}"
        );
        // the cut before conv3 passes [4 · 2, 3], not [32, 2]
        let err = net
            .stage_forward(&params, 2..5, StageInput::Activation(&act), b)
            .err()
            .expect("refused");
        assert_eq!(
            err.to_string(),
            "an activation of shape [32, 2] at the cut before layer 2, which passes [8, 3]"
        );
        assert!(net
            .stage_forward(&params, 1..5, StageInput::Activation(&act), b)
            .is_ok());
        // no images, too few parameters, a gradient of the wrong shape
        let err = net
            .stage_forward(&params, 0..5, images, (&[], &[], None))
            .err();
        assert!(matches!(err, Some(StageError::Input { .. })), "{err:?}");
        let err = net.stage_forward(&params[1..], 0..2, images, b).err();
        assert!(
            matches!(err, Some(StageError::Batch(CnnError::Params { .. }))),
            "{err:?}"
        );
        let f = net
            .stage_forward(&params, 0..2, images, b)
            .expect("forward");
        let wrong = Activation {
            values: vec![0.0; 3],
            shape: [1, 3],
        };
        let err = net.stage_backward(f, Some(&wrong)).err();
        assert!(
            matches!(err, Some(StageError::Shape { layer: 2, .. })),
            "{err:?}"
        );
    }
}
