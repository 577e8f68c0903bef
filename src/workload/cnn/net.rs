//! The seeds' CNN in burn, as a pure function of a flat parameter vector.
//!
//! ConvLSTM-D-Accel (CNN features into an LSTM) adapted to 28 × 28 images:
//! three 5 × 5 convolutions of 32, 64 and 128 filters with ReLU ("same"
//! padding), 2 × 2 max-pooling after the first two, the 7 × 7 × 128 feature map
//! read as a sequence of 49 steps of 128 features by an LSTM of 64, and a dense
//! output whose sigmoid is P(class 1).
//!
//! The runtime keeps parameters as one flat `f64` vector split into shards, so
//! a call reads its weights from that vector (in the fixed order of
//! [`CnnNet::layout`]), runs on the calling thread (the products in the `gemm`
//! kernels, which start no threads of their own: each timely worker's work
//! stays on that worker's thread), and returns the gradient
//! flattened in the same order. Same parameters and batch, same bits, on any
//! thread of one machine.
//!
//! The burn module `Net` defines the net: its parameters and their layout,
//! and `Net::forward`, the convolutions as gathered matrix products on the
//! whole batch in burn's tensors (the plain burn peer trains it with burn's
//! autodiff). Gradients and predictions run the same net with both passes
//! written out on `f32` buffers (`layers`: the gathers, products, pools and
//! their backward scatters, without an autodiff graph or burn's copies
//! between operations; `winograd`: the second and third convolutions by
//! Winograd's minimal filtering, the same up to f32 rounding; `lstm`: the
//! recurrence through time); the tests check them
//! against burn's autodiff through `Net::forward` and through burn's own
//! `Conv2d`, and against finite differences. `cargo bench --bench cnn_cost`
//! measures the cost per image.
//!
//! Each thread keeps the weights it converted last (`weights`): a call at
//! parameters whose bits equal those of kept weights reuses them instead of
//! converting 306,753 values again, as the micro-batches of one unit (all at
//! the same parameters) do. They hold exactly what a fresh conversion would,
//! so the bits do not depend on the cache.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
#[cfg(test)]
use burn::nn::pool::MaxPool2dConfig;
use burn::nn::{Initializer, Linear, LinearConfig, Lstm, LstmConfig, PaddingConfig2d};
use burn::optim::GradientsParams;
#[cfg(test)]
use burn::tensor::activation::relu;
use burn::tensor::activation::sigmoid;
use burn::tensor::{s, Device, Tensor, TensorData};
use conv::{conv_rows, Gathers};

/// The net's convolutions (each with its pooling and dropout).
const CONVOLUTIONS: usize = 3;

/// Keys the initial parameters' generator.
const INIT_STREAM: u64 = 0x434E_4E49; // "CNNI"

/// Dropout after each max-pooling, as in the seed, with masks that are a
/// pure function of keys (one per image: the job's seed, the iteration and
/// the row), never of the thread or the batch the image is computed in; so a
/// unit's gradient has the same bits whoever computes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dropout {
    /// Probability that an activation is dropped (in `[0, 1)`).
    pub rate: f64,
    /// One key per image of the batch, in batch order.
    pub keys: Vec<u64>,
}

impl Dropout {
    /// The mask of the pooled map of convolution `layer` (`positions`
    /// positions × `channels`) for the batch, in the features' row order
    /// (position after position, images inside): kept activations are scaled
    /// by 1 / (1 − rate) (inverted dropout, so prediction uses the net as is).
    pub fn mask(&self, layer: usize, positions: usize, channels: usize) -> Vec<f32> {
        let scale = (1.0 / (1.0 - self.rate)) as f32;
        let mut mask = Vec::with_capacity(positions * self.keys.len() * channels);
        for p in 0..positions {
            for &key in &self.keys {
                let base = crate::rng::hash_words(&[key, layer as u64, p as u64]);
                mask.extend((0..channels).map(|c| {
                    if crate::rng::uniform(&[base, c as u64]) < self.rate {
                        0.0
                    } else {
                        scale
                    }
                }));
            }
        }
        mask
    }
}

/// The net's topology.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CnnConfig {
    /// Images are `side` × `side` pixels, one channel.
    pub side: usize,
    /// Convolution kernel size (square).
    pub kernel: usize,
    /// Filters of the three convolutions.
    pub filters: [usize; 3],
    /// Whether a 2 × 2 max-pool follows each convolution.
    pub pool_after: [bool; 3],
    /// Hidden units of the LSTM that reads the feature map.
    pub lstm_hidden: usize,
}

impl CnnConfig {
    /// The PneumoniaMNIST net: 28 × 28, 5 × 5 kernels, 32/64/128 filters, pools
    /// after the first two convolutions (so the LSTM reads 7 × 7 = 49 steps),
    /// LSTM of 64.
    pub fn pneumonia() -> Self {
        Self {
            side: 28,
            kernel: 5,
            filters: [32, 64, 128],
            pool_after: [true, true, false],
            lstm_hidden: 64,
        }
    }

    /// Side of the last feature map.
    pub fn map_side(&self) -> usize {
        self.pool_after
            .iter()
            .fold(self.side, |s, &pool| if pool { s / 2 } else { s })
    }
}

/// The burn module.
#[derive(Module, Debug)]
pub(super) struct Net {
    conv1: Conv2d,
    conv2: Conv2d,
    conv3: Conv2d,
    lstm: Lstm,
    head: Linear,
}

impl Net {
    /// The module with every parameter zero: a template whose tensors are
    /// then replaced (zeros draw nothing from burn's process-wide generator).
    fn zeros(config: &CnnConfig, device: &Device) -> Self {
        let k = [config.kernel, config.kernel];
        let conv = |c_in: usize, c_out: usize| {
            Conv2dConfig::new([c_in, c_out], k)
                .with_padding(PaddingConfig2d::Same)
                .with_initializer(Initializer::Zeros)
                .init(device)
        };
        let [f1, f2, f3] = config.filters;
        Self {
            conv1: conv(1, f1),
            conv2: conv(f1, f2),
            conv3: conv(f2, f3),
            lstm: LstmConfig::new(f3, config.lstm_hidden, true)
                .with_initializer(Initializer::Zeros)
                .init(device),
            head: LinearConfig::new(config.lstm_hidden, 1)
                .with_initializer(Initializer::Zeros)
                .init(device),
        }
    }

    /// Logits of P(class 1), with `dropout` after each pool when training.
    ///
    /// # Shapes
    /// - `images`: `[batch, 1, side, side]`
    /// - returns: `[batch, 1]`
    pub(super) fn forward(
        &self,
        images: Tensor<4>,
        config: &CnnConfig,
        dropout: Option<&Dropout>,
    ) -> Tensor<2> {
        let [batch, ..] = images.dims();
        let (seq, steps) = self.features(images, config, dropout);
        let (z_x, w_h) = self.lstm_input(seq);
        self.head.forward(lstm_last_hidden(z_x, w_h, steps, batch)) // [batch, 1]
    }

    /// The last feature map as the LSTM's sequence, and its number of steps.
    ///
    /// The convolutions are products of matrices on the whole batch. Each
    /// reads its input as rows `[positions · batch, channels]` (one row per
    /// position of each image, positions row-major, images inside), gathers
    /// for every output row the `kernel²` input rows it reads (one zero row
    /// stands for the "same" padding; see `conv::conv_rows_index`) into one matrix
    /// `[positions · batch, kernel² · channels]`, and multiplies it by the
    /// weights, so the forward pass and both gradients are one matrix product
    /// each, and the output is again rows `[positions · batch, filters]`. A
    /// convolution followed by a pool computes its positions grouped by their
    /// place in the 2 × 2 window, so the pool is the maximum over the four
    /// quarters of its output, taken before the bias and the ReLU (both
    /// commute with it, and the bias then covers a quarter of the values).
    /// The last map's rows are step after step (step = row · side + column,
    /// the channels as features), so the LSTM reads each step as a block of
    /// contiguous rows. The same function as burn's [`Conv2d`] with "same"
    /// padding, ReLU and [`MaxPool2d`](burn::nn::pool::MaxPool2d), up to the
    /// order of the sums (see [`Net::forward_direct`]).
    ///
    /// # Shapes
    /// - `images`: `[batch, 1, side, side]`
    /// - returns: `[steps · batch, features]`, step after step
    ///
    /// With `dropout`, each pooled map is multiplied by its keyed mask
    /// ([`Dropout::mask`]) before the next layer reads it.
    fn features(
        &self,
        images: Tensor<4>,
        config: &CnnConfig,
        dropout: Option<&Dropout>,
    ) -> (Tensor<2>, usize) {
        let [batch, ..] = images.dims();
        let gathers = Gathers::of(config, batch, &images.device());
        let mut x = first_rows(images, &gathers, config);
        let mut s = config.side;
        for layer in 0..CONVOLUTIONS {
            (x, s) = self.convolve(layer, x, s, (&gathers, config, dropout));
        }
        (x, s * s)
    }

    /// Convolution `layer` (0, 1 or 2) of [`Net::features`] on `x`, the
    /// rows of the map before it (of side `s`; for the first, the gathered
    /// matrix of [`first_rows`]), with its pool and dropout: the rows of
    /// its map, and that map's side.
    fn convolve(
        &self,
        layer: usize,
        x: Tensor<2>,
        s: usize,
        (gathers, config, dropout): (&Gathers, &CnnConfig, Option<&Dropout>),
    ) -> (Tensor<2>, usize) {
        let device = x.device();
        let taps = config.kernel * config.kernel;
        let conv = [&self.conv1, &self.conv2, &self.conv3][layer];
        let channels = conv.weight.dims()[1];
        let pool = config.pool_after[layer];
        let mut x = x;
        let batch = gathers.batch;
        if layer > 0 {
            let padded = Tensor::cat(vec![x, Tensor::<2>::zeros([1, channels], &device)], 0);
            let index = gathers.rest[layer - 1].clone();
            let [len] = index.dims();
            x = padded
                .select(0, index)
                .reshape([len / taps, taps * channels]); // [positions · batch, (di, dj, c)]
        }
        x = conv_rows(conv, x, channels, pool);
        let channels = conv.weight.dims()[0];
        let mut s = s;
        if pool {
            s /= 2;
            if let Some(d) = dropout.filter(|d| d.rate > 0.0) {
                let mask = d.mask(layer, s * s, channels);
                x = x * Tensor::<2>::from_data(
                    TensorData::new(mask, [s * s * batch, channels]),
                    &device,
                );
            }
        }
        (x, s)
    }

    /// [`Net::forward`] through burn's own [`Conv2d`] and
    /// [`MaxPool2d`](burn::nn::pool::MaxPool2d): the
    /// reference the matrix form is checked against.
    #[cfg(test)]
    pub(super) fn forward_direct(&self, images: Tensor<4>, config: &CnnConfig) -> Tensor<2> {
        let pool = MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init();
        let mut x = images;
        for (conv, &pooled) in [&self.conv1, &self.conv2, &self.conv3]
            .into_iter()
            .zip(&config.pool_after)
        {
            x = relu(conv.forward(x)); // [batch, filters, s, s]
            if pooled {
                x = pool.forward(x); // [batch, filters, s/2, s/2]
            }
        }
        let [batch, channels, h, w] = x.dims();
        let seq = x.reshape([batch, channels, h * w]); // [batch, feat, seq]
        let seq = seq.permute([2, 0, 1]).reshape([h * w * batch, channels]); // [seq · batch, feat]
        let (z_x, w_h) = self.lstm_input(seq);
        self.head.forward(lstm_last_hidden(z_x, w_h, h * w, batch)) // [batch, 1]
    }

    /// The LSTM's parameters (burn's [`Lstm`]: the same gates, the same
    /// layout) as two products: the input's share of the four gates for
    /// every step, `z_x = x · [W_i W_f W_o W_c] + b` (one product before the
    /// recurrence), and the hidden state's weights `U = [U_i U_f U_o U_c]`.
    ///
    /// # Shapes
    /// - `seq`: `[steps · batch, features]`
    /// - returns: `z_x` `[steps · batch, 4 · hidden]` and `U` `[hidden, 4 · hidden]`
    pub(super) fn lstm_input(&self, seq: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
        let lstm = &self.lstm;
        let forget = lstm
            .forget_gate
            .as_ref()
            .expect("the net's LSTM has its own forget gate");
        let gates = [&lstm.input_gate, forget, &lstm.output_gate, &lstm.cell_gate];
        let bias = |linear: &Linear| {
            linear
                .bias
                .as_ref()
                .map(|b| b.val())
                .expect("the net's LSTM has biases")
        };
        let w_x = Tensor::cat(
            gates
                .iter()
                .map(|g| g.input_transform.weight.val())
                .collect(),
            1,
        ); // [features, 4 · hidden]
        let w_h = Tensor::cat(
            gates
                .iter()
                .map(|g| g.hidden_transform.weight.val())
                .collect(),
            1,
        ); // [hidden, 4 · hidden]
        let b = Tensor::cat(
            gates
                .iter()
                .map(|g| bias(&g.input_transform) + bias(&g.hidden_transform))
                .collect(),
            0,
        )
        .unsqueeze_dim::<2>(0); // [1, 4 · hidden]
        (seq.matmul(w_x) + b, w_h)
    }
}

/// The first convolution's gathered matrix `[positions · batch, kernel²]`
/// of `images`, as data: the images carry no gradient.
fn first_rows(images: Tensor<4>, gathers: &Gathers, config: &CnnConfig) -> Tensor<2> {
    let [_, _, side, _] = images.dims();
    let device = images.device();
    let taps = config.kernel * config.kernel;
    let pixels = images.into_data().convert::<f32>();
    let pixels = pixels.as_slice::<f32>().expect("converted to f32");
    let map = side * side;
    let mut gathered = Vec::with_capacity(gathers.first.len() * gathers.batch);
    for reads in gathers.first.chunks_exact(taps) {
        for image in pixels.chunks_exact(map) {
            // past the image: the zero row
            gathered.extend(
                reads
                    .iter()
                    .map(|&p| image.get(p as usize).copied().unwrap_or(0.0)),
            );
        }
    }
    let len = gathered.len();
    Tensor::<2>::from_data(TensorData::new(gathered, [len / taps, taps]), &device)
}

/// The LSTM's hidden state after the last step, from [`Net::lstm_input`]:
/// per step one product `h · U`, one sigmoid over the three gates, and no
/// copy of the hidden state into an output sequence (only the last one is
/// read). The state starts at zero, so the first step has no product with
/// it. Differentiable by burn's autodiff (the peer's and the tests'
/// reference); [`CnnNet::gradient`] runs the recurrence itself (`LstmTape`).
///
/// A step's rows are cut from `z_x` in two levels (blocks of about √steps
/// steps, then steps), because the gradient of a cut is as large as what it
/// is cut from.
///
/// # Shapes
/// - `z_x`: `[steps · batch, 4 · hidden]`, step after step
/// - `w_h`: `[hidden, 4 · hidden]`
/// - returns: `[batch, hidden]`
fn lstm_last_hidden(z_x: Tensor<2>, w_h: Tensor<2>, steps: usize, batch: usize) -> Tensor<2> {
    let [hidden, _] = w_h.dims();
    if steps == 0 {
        return Tensor::<2>::zeros([batch, hidden], &z_x.device());
    }
    let block = (1..=steps).find(|k| k * k >= steps).unwrap_or(steps);
    let mut state: Option<(Tensor<2>, Tensor<2>)> = None; // (h, c)
    for start in (0..steps).step_by(block) {
        let end = (start + block).min(steps);
        let z_block = z_x.clone().slice(s![start * batch..end * batch, ..]);
        for t in 0..end - start {
            let z_t = z_block.clone().slice(s![t * batch..(t + 1) * batch, ..]);
            let z = match &state {
                Some((h, _)) => z_t + h.clone().matmul(w_h.clone()),
                None => z_t,
            }; // [batch, 4 · hidden]
            let ifo = sigmoid(z.clone().slice(s![.., 0..3 * hidden]));
            let candidate = z.slice(s![.., 3 * hidden..4 * hidden]).tanh();
            let i = ifo.clone().slice(s![.., 0..hidden]);
            let o = ifo.clone().slice(s![.., 2 * hidden..3 * hidden]);
            let c = match state {
                Some((_, c)) => ifo.slice(s![.., hidden..2 * hidden]) * c + i * candidate,
                None => i * candidate,
            };
            let h = o * c.clone().tanh();
            state = Some((h, c));
        }
    }
    state.map(|(h, _)| h).expect("at least one step")
}

/// Σ_i w_i · BCE(σ(z_i), y_i) on logits, stably: max(z, 0) − y·z + ln(1 + e^−|z|).
///
/// # Shapes
/// - `z`, `y`, `w`: `[n, 1]`; returns `[1]`
pub(super) fn weighted_bce_sum(z: Tensor<2>, y: Tensor<2>, w: Tensor<2>) -> Tensor<1> {
    let bce = z.clone().clamp_min(0.0) - z.clone() * y + z.abs().neg().exp().log1p();
    (bce * w).sum()
}

/// One named tensor of the flat parameter vector.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ParamSlot {
    /// Module path and role, e.g. `conv1.weight`, `lstm.input_gate.input_transform.bias`.
    pub name: String,
    /// The tensor's shape.
    pub shape: Vec<usize>,
    /// Its first coordinate in the flat vector.
    pub offset: usize,
}

/// A batch that does not match the net.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CnnError {
    /// Pixels, labels and weights disagree on the batch size.
    #[error("a batch of {labels} labels and {weights} weights needs {expected} pixels ({side} × {side} per image), got {pixels}")]
    BatchShape {
        /// Pixels given.
        pixels: usize,
        /// Pixels expected.
        expected: usize,
        /// Labels given.
        labels: usize,
        /// Weights given.
        weights: usize,
        /// Image side.
        side: usize,
    },
    /// Dropout keys and images disagree on the batch size.
    #[error("{keys} dropout keys for a batch of {images} images")]
    DropoutKeys {
        /// Keys given.
        keys: usize,
        /// Images in the batch.
        images: usize,
    },
    /// The parameter vector has the wrong length.
    #[error("the net has {expected} parameters, got {found}")]
    Params {
        /// The net's count.
        expected: usize,
        /// Given.
        found: usize,
    },
}

/// The gradient of a batch's weighted loss sum.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchGradient {
    /// ∂(Σ_i w_i · BCE_i)/∂θ, one entry per parameter, in layout order.
    pub grad: Vec<f64>,
    /// Σ_i w_i · BCE_i.
    pub loss_sum: f64,
}

/// The CNN as functions of a flat parameter vector.
#[derive(Debug, Clone)]
pub struct CnnNet {
    config: CnnConfig,
    layout: Vec<ParamSlot>,
    count: usize,
}

/// Reads every float parameter in visit order.
struct Reader {
    path: Vec<String>,
    slots: Vec<ParamSlot>,
    values: Vec<f64>,
    grads: Option<GradientsParams>,
    count: usize,
}

impl Reader {
    /// A reader of values (`grads` None) or of the gradients in `grads`,
    /// with room for `capacity` of them.
    fn new(grads: Option<GradientsParams>, capacity: usize) -> Self {
        Self {
            path: Vec::new(),
            slots: Vec::new(),
            values: Vec::with_capacity(capacity),
            grads,
            count: 0,
        }
    }
}

impl ModuleVisitor for Reader {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_owned());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let tensor = param.val();
        let shape = tensor.dims().to_vec();
        let len: usize = shape.iter().product();
        // The path ends with the parameter's own field name (`weight`, `bias`).
        let name: Vec<&str> = self
            .path
            .iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
            .collect();
        self.slots.push(ParamSlot {
            name: name.join("."),
            shape,
            offset: self.count,
        });
        self.count += len;
        let source = match &self.grads {
            Some(grads) => grads.get::<D>(param.id),
            None => Some(tensor),
        };
        match source {
            Some(t) => self.values.extend(
                t.into_data()
                    .convert::<f32>()
                    .as_slice::<f32>()
                    .expect("converted to f32")
                    .iter()
                    .map(|&v| f64::from(v)),
            ),
            // A parameter the loss does not reach has a zero gradient.
            None => self.values.extend(std::iter::repeat_n(0.0, len)),
        }
    }
}

/// Replaces every float parameter, in visit order, from a flat vector.
struct Loader<'a> {
    values: &'a [f64],
    at: usize,
    device: Device,
}

impl ModuleMapper for Loader<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let shape: [usize; D] = param.val().dims();
        let len: usize = shape.iter().product();
        let data: Vec<f32> = self.values[self.at..self.at + len]
            .iter()
            .map(|&v| v as f32)
            .collect();
        self.at += len;
        Param::from_tensor(Tensor::from_data(
            TensorData::new(data, shape),
            &self.device,
        ))
    }
}

impl CnnNet {
    /// The net of `config`.
    pub fn new(config: CnnConfig) -> Self {
        let net = Net::zeros(&config, &Device::flex());
        let mut reader = Reader::new(None, 0);
        net.visit(&mut reader);
        Self {
            config,
            layout: reader.slots,
            count: reader.count,
        }
    }

    /// Its topology.
    pub fn config(&self) -> &CnnConfig {
        &self.config
    }

    /// Length of the flat parameter vector.
    pub fn param_count(&self) -> usize {
        self.count
    }

    /// The named tensors in flat order.
    pub fn layout(&self) -> &[ParamSlot] {
        &self.layout
    }

    /// The initial parameters, a pure function of `seed`: every weight and
    /// bias uniform in ±1/√fan_in (PyTorch's default for convolutions and
    /// dense layers; ±1/√hidden for the LSTM), drawn tensor by tensor from our
    /// own keyed generator rather than burn's process-wide one, so concurrent
    /// jobs cannot disturb it.
    pub fn init_params(&self, seed: u64) -> Vec<f64> {
        let mut values = Vec::with_capacity(self.count);
        let mut fan_in = 1;
        for (i, slot) in self.layout.iter().enumerate() {
            if slot.shape.len() > 1 {
                // conv [out, in, k, k]: in·k·k; linear [in, out]: in
                fan_in = if slot.shape.len() == 4 {
                    slot.shape[1..].iter().product()
                } else {
                    slot.shape[0]
                };
            }
            let fan_in = if slot.name.starts_with("lstm.") {
                self.config.lstm_hidden
            } else {
                fan_in
            };
            let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
            let mut rng = crate::rng::KeyedRng::new(&[seed, INIT_STREAM, i as u64]);
            let len: usize = slot.shape.iter().product();
            values.extend((0..len).map(|_| {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                // through f32, as the net computes
                f64::from(((2.0 * u - 1.0) * bound) as f32)
            }));
        }
        values
    }

    pub(super) fn module(&self, params: &[f64], device: &Device) -> Result<Net, CnnError> {
        if params.len() != self.count {
            return Err(CnnError::Params {
                expected: self.count,
                found: params.len(),
            });
        }
        let template = Net::zeros(&self.config, device);
        Ok(template.map(&mut Loader {
            values: params,
            at: 0,
            device: device.clone(),
        }))
    }

    pub(super) fn images(&self, pixels: &[f32], n: usize, device: &Device) -> Tensor<4> {
        let s = self.config.side;
        Tensor::<4>::from_data(TensorData::new(pixels.to_vec(), [n, 1, s, s]), device)
    }

    fn check(&self, pixels: usize, labels: usize, weights: usize) -> Result<(), CnnError> {
        let side = self.config.side;
        let expected = labels * side * side;
        if pixels != expected || weights != labels {
            return Err(CnnError::BatchShape {
                pixels,
                expected,
                labels,
                weights,
                side,
            });
        }
        Ok(())
    }

    /// Σ_i w_i · BCE(σ(z_i), y_i) over a batch and its gradient at `params`.
    ///
    /// # Shapes
    /// - `pixels`: `[n · side · side]`, image after image, row-major, in [0, 1]
    /// - `labels`, `weights`: `[n]`, labels 0 or 1
    pub fn gradient(
        &self,
        params: &[f64],
        pixels: &[f32],
        labels: &[f32],
        weights: &[f32],
    ) -> Result<BatchGradient, CnnError> {
        self.gradient_with(params, pixels, labels, weights, None)
    }

    /// [`CnnNet::gradient`] with `dropout` after each max-pooling (a key per
    /// image of the batch).
    pub fn gradient_with(
        &self,
        params: &[f64],
        pixels: &[f32],
        labels: &[f32],
        weights: &[f32],
        dropout: Option<&Dropout>,
    ) -> Result<BatchGradient, CnnError> {
        self.check(pixels.len(), labels.len(), weights.len())?;
        if let Some(d) = dropout {
            if d.keys.len() != labels.len() {
                return Err(CnnError::DropoutKeys {
                    keys: d.keys.len(),
                    images: labels.len(),
                });
            }
        }
        let n = labels.len();
        if n == 0 {
            return Ok(BatchGradient {
                grad: vec![0.0; self.count],
                loss_sum: 0.0,
            });
        }
        let w = self.weights(params)?;
        let forward = self.forward_layers(
            w,
            0..stages::LAYERS.len(),
            stages::StageInput::Images(pixels),
            n,
            Some((labels, weights, dropout)),
        );
        let (grad, _) = self.backward_layers(forward.tape(), None);
        Ok(BatchGradient {
            grad,
            loss_sum: forward.loss_sum.unwrap_or(0.0),
        })
    }

    /// Parameters of a burn module in layout order.
    pub(super) fn flatten(&self, net: &Net) -> Vec<f64> {
        let mut reader = Reader::new(None, self.count);
        net.visit(&mut reader);
        reader.values
    }

    /// P(class 1) of each image at `params` (no gradient).
    pub fn predict(&self, params: &[f64], pixels: &[f32]) -> Result<Vec<f32>, CnnError> {
        let per_image = self.config.side * self.config.side;
        let n = pixels.len() / per_image;
        self.check(pixels.len(), n, n)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let w = self.weights(params)?;
        let forward = self.forward_layers(
            w,
            0..stages::LAYERS.len(),
            stages::StageInput::Images(pixels),
            n,
            None,
        );
        Ok(forward.probabilities())
    }
}

mod activation;
mod conv;
mod gemm;
pub mod infer;
mod layers;
mod lstm;
pub mod stages;
#[cfg(test)]
mod tests;
mod weights;
mod winograd;
