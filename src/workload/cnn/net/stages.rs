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
//! gradient is this forward and backward over all five layers, each layer's
//! passes are the same operations whichever stage runs them, and what
//! crosses a cut (an activation, or its gradient) is passed as computed.
//! The tests check it for every cut.

use std::ops::Range;
use std::sync::Arc;

use super::activation::sigmoid;
use super::layers::{
    head, head_backward, image_rows, loss_sum, lstm_input, lstm_input_backward, ConvTape,
};
use super::lstm::LstmTape;
use super::weights::{Grads, Weights};
use super::{CnnError, CnnNet, Dropout, CONVOLUTIONS};

/// The net's layers in order, by the names a cut and the parameters'
/// layout use.
pub const LAYERS: [&str; 5] = ["conv1", "conv2", "conv3", "lstm", "head"];

/// Each layer's forward and backward cost, ms per image, as
/// `benches/cnn_layers.rs` measured them on one core (run
/// `2026-11-30-vm-cnn-winograd-4x4`, the mean of two runs at micro-batches
/// of 32, conv2 and conv3 by Winograd F(4 × 4, 5 × 5)): what the default
/// cut into stages evens out. Only their ratios matter.
pub const LAYER_COSTS: [(f64, f64); 5] = [
    (0.0706, 0.0369),
    (0.1611, 0.2066),
    (0.1057, 0.1996),
    (0.0722, 0.1351),
    (0.0055, 0.0003),
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

impl StageForward {
    /// What the backward reads.
    pub(super) fn tape(&self) -> &Tape {
        &self.tape
    }

    /// Each image's P(class 1), σ of the head's logits (the last stage's;
    /// empty for the others).
    pub(super) fn probabilities(&self) -> Vec<f32> {
        self.tape.head.as_ref().map_or_else(Vec::new, |head| {
            head.z.iter().map(|&z| sigmoid(z)).collect()
        })
    }
}

/// What a stage's backward needs of its forward.
pub(super) struct Tape {
    layers: Range<usize>,
    batch: usize,
    weights: Arc<Weights>,
    /// The stage's convolutions, in order.
    convs: Vec<ConvTape>,
    /// The LSTM's input rows and its recurrence.
    lstm: Option<(Vec<f32>, LstmTape)>,
    /// The head's input `h` and logits, and the labels and weights.
    head: Option<HeadTape>,
}

struct HeadTape {
    h: Vec<f32>,
    z: Vec<f32>,
    y: Vec<f32>,
    w: Vec<f32>,
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
        let w = self.weights(params)?;
        Ok(self.forward_layers(w, layers, input, n, Some((labels, weights, dropout))))
    }

    /// The forward of layers `layers` on `n` images at `w`: with `batch`
    /// (labels, weights, dropout) kept for the backward, without it (an
    /// inference) with no tapes kept and no loss.
    pub(super) fn forward_layers(
        &self,
        w: Arc<Weights>,
        layers: Range<usize>,
        input: StageInput<'_>,
        n: usize,
        batch: Option<(&[f32], &[f32], Option<&Dropout>)>,
    ) -> StageForward {
        let (a, b) = (layers.start, layers.end);
        let config = &self.config;
        let dropout = batch.and_then(|(_, _, d)| d);
        let (mut x, mut h) = match input {
            StageInput::Images(pixels) => (Some(image_rows(pixels, n, config.side)), None),
            StageInput::Activation(act) if a <= LSTM => (Some(act.values.clone()), None),
            StageInput::Activation(act) => (None, Some(act.values.clone())),
        };
        let mut side = (0..a.min(CONVOLUTIONS)).fold(config.side, |s, l| {
            if config.pool_after[l] {
                s / 2
            } else {
                s
            }
        });
        let mut convs = Vec::new();
        for layer in a..b.min(CONVOLUTIONS) {
            let rows = x.take().expect("rows");
            let (out, s, tape) =
                ConvTape::forward(&w.conv[layer], layer, &rows, (side, n), config, dropout);
            (x, side) = (Some(out), s);
            if batch.is_some() {
                convs.push(tape);
            }
        }
        let mut output = None;
        if b <= CONVOLUTIONS {
            output = x.take().map(|values| Activation {
                values,
                shape: self.cut_shape(b, n),
            });
        }
        let hidden = config.lstm_hidden;
        let mut lstm = None;
        if a <= LSTM && b > LSTM {
            let seq = x.take().expect("rows");
            let z_x = lstm_input(&w.w_x, &w.b_x, &seq);
            let steps = side * side;
            let tape = LstmTape::forward(&z_x, &w.w_h, (hidden, steps, n));
            h = Some(tape.last_hidden());
            if batch.is_some() {
                lstm = Some((seq, tape));
            }
        }
        if b == HEAD {
            output = h.take().map(|values| Activation {
                values,
                shape: self.cut_shape(b, n),
            });
        }
        let (mut head_tape, mut loss) = (None, None);
        if b > HEAD {
            let h = h.expect("the LSTM's output or the stage's input");
            let z = head(&w.head_w, w.head_b, &h);
            let (y, weights) = batch.map_or((&[][..], &[][..]), |(y, w, _)| (y, w));
            if batch.is_some() {
                loss = Some(loss_sum(&z, y, weights));
            }
            head_tape = Some(HeadTape {
                h,
                z,
                y: y.to_vec(),
                w: weights.to_vec(),
            });
        }
        StageForward {
            output,
            loss_sum: loss,
            tape: Tape {
                layers,
                batch: n,
                weights: w,
                convs,
                lstm,
                head: head_tape,
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
        let b = forward.tape.layers.end;
        let d_out = match (b > HEAD, d_output, &forward.output) {
            (true, _, _) => None,
            (false, Some(d), Some(out))
                if d.shape == out.shape && d.values.len() == out.values.len() =>
            {
                Some(d.values.clone())
            }
            (false, d, out) => {
                return Err(StageError::Shape {
                    layer: b,
                    expected: out.as_ref().map_or([0, 0], |o| o.shape),
                    found: d.map_or([0, 0], |d| d.shape),
                })
            }
        };
        let (grad, d_input) = self.backward_layers(&forward.tape, d_out);
        Ok(StageGradient { grad, d_input })
    }

    /// The backward of a forward's tape from `d_out`, the gradient of its
    /// output (None when it ends in the loss): the gradient of its layers'
    /// parameters, and of its input unless it began at the images.
    pub(super) fn backward_layers(
        &self,
        t: &Tape,
        d_out: Option<Vec<f32>>,
    ) -> (Vec<f64>, Option<Activation>) {
        let (a, b) = (t.layers.start, t.layers.end);
        let w = &t.weights;
        let n = t.batch;
        let hidden = self.config.lstm_hidden;
        let mut grads = Grads::new(self, self.layer_params(a..b));
        let mut d = d_out;
        if let Some(head) = &t.head {
            let (d_w, d_b, d_h) = head_backward(&w.head_w, &head.h, (&head.z, &head.y, &head.w));
            grads.head(&d_w, d_b);
            d = Some(d_h);
        }
        if let Some((seq, tape)) = &t.lstm {
            let d_h = d.take().expect("∂L/∂h");
            let (d_z_x, d_w_h) = tape.backward(&d_h);
            let (d_w_x, d_b_x, d_seq) = lstm_input_backward(&w.w_x, 4 * hidden, seq, &d_z_x);
            grads.lstm(&d_w_x, &d_b_x, &d_w_h);
            d = Some(d_seq);
        }
        for tape in t.convs.iter().rev() {
            let layer = tape.layer();
            let d_conv = d.take().expect("∂L/∂ of the convolution's output");
            let (d_w, d_b, d_x) = tape.backward(&w.conv[layer], &d_conv, layer > 0);
            grads.conv(layer, &w.conv[layer], &d_w, &d_b);
            d = d_x;
        }
        let d_input = d.filter(|_| a > 0).map(|values| Activation {
            values,
            shape: self.cut_shape(a, n),
        });
        (grads.values, d_input)
    }
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
