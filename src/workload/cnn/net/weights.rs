//! The flat parameter vector as the products read it (`Weights`), and the
//! gradient of a range of layers put back in the vector's layout order
//! (`Grads`).
//!
//! Each thread keeps the weights it built last: the micro-batches of one
//! unit (all at the same parameters) convert the 306,753 values once. A kept
//! entry holds exactly what a fresh build would, so the bits do not depend
//! on the cache.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use super::winograd::Winograd;
use super::{CnnConfig, CnnError, CnnNet, ParamSlot, CONVOLUTIONS};

/// Entries a thread keeps: a net's current parameters, with room for a
/// second net (or the parameters before an update) on the same thread.
const KEPT_WEIGHTS: usize = 4;

/// The LSTM's gates in the order of its products' columns.
const GATES: [&str; 4] = ["input_gate", "forget_gate", "output_gate", "cell_gate"];

/// A convolution's parameters.
pub(super) struct ConvWeights {
    /// The weights as `[kernel² · channels, filters]`: row `tap · channels +
    /// c` (tap `di · kernel + dj`), the columns of the gathered input.
    pub(super) w: Vec<f32>,
    /// `[filters]`.
    pub(super) b: Vec<f32>,
    /// Input channels.
    pub(super) channels: usize,
    /// Output channels.
    pub(super) filters: usize,
    /// The transforms and the weights' transform `U` when the convolution
    /// runs by [`Winograd`] (more than one input channel, a kernel it
    /// takes); otherwise it runs as a gathered product.
    pub(super) winograd: Option<(Winograd, Vec<f32>)>,
}

/// The net's parameters as `f32` matrices.
pub(super) struct Weights {
    pub(super) conv: Vec<ConvWeights>,
    /// The LSTM's input weights `[features, 4 · hidden]`, the gates `[i, f,
    /// o, g]` side by side.
    pub(super) w_x: Vec<f32>,
    /// The gates' biases, input and hidden transform added: `[4 · hidden]`.
    pub(super) b_x: Vec<f32>,
    /// The hidden state's weights `U`: `[hidden, 4 · hidden]`.
    pub(super) w_h: Vec<f32>,
    /// `[hidden]`.
    pub(super) head_w: Vec<f32>,
    pub(super) head_b: f32,
}

struct Kept {
    config: CnnConfig,
    /// f64 bits: `-0.0` and `0.0`, or two NaNs, are different parameters.
    params: Vec<u64>,
    weights: Arc<Weights>,
}

thread_local! {
    /// Most recently used last.
    static KEPT: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
}

impl CnnNet {
    /// The slot named `name`.
    fn slot(&self, name: &str) -> &ParamSlot {
        self.layout
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("the net's layout has {name}"))
    }

    /// The values of slot `name` as f32.
    fn values<'a>(&self, params: &'a [f64], name: &str) -> impl Iterator<Item = f32> + 'a {
        let slot = self.slot(name);
        let len: usize = slot.shape.iter().product();
        params[slot.offset..slot.offset + len]
            .iter()
            .map(|&v| v as f32)
    }

    /// The weights of `params`, this thread's kept ones if it built them
    /// from the same bits.
    pub(super) fn weights(&self, params: &[f64]) -> Result<Arc<Weights>, CnnError> {
        if params.len() != self.count {
            return Err(CnnError::Params {
                expected: self.count,
                found: params.len(),
            });
        }
        let same = |k: &Kept| {
            k.config == self.config
                && k.params.len() == params.len()
                && k.params.iter().zip(params).all(|(&a, &p)| a == p.to_bits())
        };
        let kept = KEPT.with_borrow_mut(|kept| {
            let at = kept.iter().position(same)?;
            let k = kept.remove(at);
            let w = Arc::clone(&k.weights);
            kept.push(k);
            Some(w)
        });
        if let Some(w) = kept {
            return Ok(w);
        }
        let weights = Arc::new(self.build_weights(params));
        KEPT.with_borrow_mut(|kept| {
            if kept.len() >= KEPT_WEIGHTS {
                kept.remove(0);
            }
            kept.push(Kept {
                config: self.config.clone(),
                params: params.iter().map(|p| p.to_bits()).collect(),
                weights: Arc::clone(&weights),
            });
        });
        Ok(weights)
    }

    fn build_weights(&self, params: &[f64]) -> Weights {
        let taps = self.config.kernel * self.config.kernel;
        let conv = (0..CONVOLUTIONS)
            .map(|l| {
                let slot = self.slot(&format!("conv{}.weight", l + 1));
                let (filters, channels) = (slot.shape[0], slot.shape[1]);
                let stored = &params[slot.offset..slot.offset + filters * channels * taps];
                // stored [filters, channels, kernel, kernel]; 16 filters at a
                // time, so each write fills a run of 16 consecutive values
                // (a filter at a time scattered every value a cache line
                // apart)
                let mut w = vec![0.0f32; taps * channels * filters];
                for o0 in (0..filters).step_by(16) {
                    let block = o0..filters.min(o0 + 16);
                    for c in 0..channels {
                        for t in 0..taps {
                            let to = (t * channels + c) * filters;
                            for o in block.clone() {
                                w[to + o] = stored[(o * channels + c) * taps + t] as f32;
                            }
                        }
                    }
                }
                let winograd = Winograd::for_kernel(self.config.kernel)
                    .filter(|_| channels > 1)
                    .map(|t| {
                        let u = t.weights(&w, channels, filters);
                        (t, u)
                    });
                ConvWeights {
                    w,
                    winograd,
                    b: self
                        .values(params, &format!("conv{}.bias", l + 1))
                        .collect(),
                    channels,
                    filters,
                }
            })
            .collect();
        let hidden = self.config.lstm_hidden;
        // Linear weights are stored [in, out]: gate g's columns of a row
        // are g · hidden.. (g + 1) · hidden of the product's row
        let side_by_side = |transform: &str, rows: usize| {
            let mut m = vec![0.0f32; rows * 4 * hidden];
            for (g, gate) in GATES.iter().enumerate() {
                let name = format!("lstm.{gate}.{transform}.weight");
                for (k, v) in self.values(params, &name).enumerate() {
                    m[(k / hidden) * 4 * hidden + g * hidden + k % hidden] = v;
                }
            }
            m
        };
        let features = self.config.filters[CONVOLUTIONS - 1];
        let b_x = GATES
            .iter()
            .flat_map(|gate| {
                let b_in = self.values(params, &format!("lstm.{gate}.input_transform.bias"));
                let b_h = self.values(params, &format!("lstm.{gate}.hidden_transform.bias"));
                b_in.zip(b_h).map(|(a, b)| a + b).collect::<Vec<_>>()
            })
            .collect();
        Weights {
            conv,
            w_x: side_by_side("input_transform", features),
            b_x,
            w_h: side_by_side("hidden_transform", hidden),
            head_w: self.values(params, "head.weight").collect(),
            head_b: self.values(params, "head.bias").next().unwrap_or(0.0),
        }
    }
}

/// The gradient of the parameters in `range` of the flat vector (a range
/// of layers), filled layer by layer in layout order.
pub(super) struct Grads<'a> {
    net: &'a CnnNet,
    range: Range<usize>,
    pub(super) values: Vec<f64>,
}

impl<'a> Grads<'a> {
    /// Zeros for `range`.
    pub(super) fn new(net: &'a CnnNet, range: Range<usize>) -> Self {
        Self {
            values: vec![0.0; range.len()],
            net,
            range,
        }
    }

    /// Slot `name`'s coordinates in `values`.
    fn at(&mut self, name: &str) -> &mut [f64] {
        let slot = self.net.slot(name);
        let len: usize = slot.shape.iter().product();
        let start = slot.offset - self.range.start;
        &mut self.values[start..start + len]
    }

    /// Convolution `layer`'s, from `d_w` in [`ConvWeights::w`]'s layout.
    pub(super) fn conv(&mut self, layer: usize, w: &ConvWeights, d_w: &[f32], d_b: &[f32]) {
        let (filters, channels) = (w.filters, w.channels);
        let taps = d_w.len() / (filters * channels).max(1);
        let stored = self.at(&format!("conv{}.weight", layer + 1));
        for (o, per_filter) in stored.chunks_exact_mut(channels * taps).enumerate() {
            for (c, per_channel) in per_filter.chunks_exact_mut(taps).enumerate() {
                for (t, v) in per_channel.iter_mut().enumerate() {
                    *v = f64::from(d_w[(t * channels + c) * filters + o]);
                }
            }
        }
        put(self.at(&format!("conv{}.bias", layer + 1)), d_b);
    }

    /// The LSTM's, from the gradients of [`Weights::w_x`], `b_x` and
    /// `w_h` (the gradient of a gate's bias is both of its transforms').
    pub(super) fn lstm(&mut self, d_w_x: &[f32], d_b_x: &[f32], d_w_h: &[f32]) {
        let hidden = d_b_x.len() / 4;
        for (g, gate) in GATES.iter().enumerate() {
            for (transform, m) in [("input_transform", d_w_x), ("hidden_transform", d_w_h)] {
                let stored = self.at(&format!("lstm.{gate}.{transform}.weight"));
                for (k, v) in stored.iter_mut().enumerate() {
                    *v = f64::from(m[(k / hidden) * 4 * hidden + g * hidden + k % hidden]);
                }
                let bias = &d_b_x[g * hidden..(g + 1) * hidden];
                put(self.at(&format!("lstm.{gate}.{transform}.bias")), bias);
            }
        }
    }

    /// The head's.
    pub(super) fn head(&mut self, d_w: &[f32], d_b: f32) {
        put(self.at("head.weight"), d_w);
        put(self.at("head.bias"), &[d_b]);
    }
}

fn put(to: &mut [f64], from: &[f32]) {
    for (t, &f) in to.iter_mut().zip(from) {
        *t = f64::from(f);
    }
}
