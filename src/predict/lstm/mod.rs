//! `lstm`: DPro-SM's predictor. A burn LSTM reads the last `window` steps of a
//! worker's history (ratio to the iteration median, barrier wait, share × workers,
//! spread; each standardised with the training set's mean and deviation) and
//! predicts the change of the ratio from a base to the next step: the median
//! ratio of the last 16 steps (the default, [`Base::Median`]) or the last step's
//! ([`Base::Last`], the models trained before the base was a setting), so an
//! untrained or silent model falls back to the base.
//!
//! Training (burn, `Device::flex()` with autodiff): Adam on windows cut from the
//! series, L1 loss (the evaluation scores mean absolute error), seeded
//! initialisation and shuffles, early stopping on a validation split that lies
//! after the training windows in time, the best epoch's weights kept.
//!
//! Inference runs the same cell equations in plain Rust on weights read out of
//! the burn module (tested equal to burn's forward), because one iteration
//! boundary must cost well under a millisecond for 64 workers and a tensor
//! library's per-operation overhead does not fit that.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Lstm, LstmConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::{Predictor, Step, WorkerSeries, DEFAULT_MEDIAN_WINDOW};
use crate::rng::KeyedRng;

pub mod calibrate;
pub use calibrate::{CalibratedLstm, Calibration};

/// The inputs each step contributes, in order. A model trained on another list
/// cannot be loaded.
pub const FEATURES: [&str; 4] = ["ratio", "wait_ratio", "share_x_workers", "spread"];

/// Name of the feature set written into every model card.
pub const FEATURE_SET: &str = "forestall-steps-v1";

/// Format tag of the model card.
const CARD_FORMAT: &str = "forestall-lstm-model";

/// Held while seeding the backend's generator and drawing the initial
/// weights: the generator is one per process, so two fits on two threads
/// (tests run side by side, a bench's predictors) would otherwise draw from
/// each other's seeds and not be reproducible.
static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Model card file in a model directory.
pub const CARD_FILE: &str = "model.json";

/// burn weights file in a model directory.
pub const WEIGHTS_FILE: &str = "weights.bpk";

const N_FEATURES: usize = FEATURES.len();

/// Smallest deviation a feature is scaled by: a feature constant in training
/// (a share of work that never moved) must not blow up when it moves later.
const STD_FLOOR: f64 = 0.01;

/// Training settings (all saved in the model card).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LstmSettings {
    /// Steps of history the LSTM reads.
    pub window: usize,
    /// Hidden units.
    pub hidden: usize,
    /// Upper bound on training epochs.
    pub max_epochs: usize,
    /// Epochs without a better validation loss before stopping.
    pub patience: usize,
    /// Windows per Adam step.
    pub batch: usize,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Share of each series' training steps (its latest) used for validation.
    pub validation: f64,
    /// Seed of the initial weights and of the shuffles.
    pub seed: u64,
    /// At most this many training windows (evenly thinned beyond it).
    pub max_windows: usize,
    /// What the predicted change is added to. A card without it predates the
    /// setting: its model was trained on changes from the last step.
    #[serde(default = "Base::before_the_setting")]
    pub base: Base,
}

/// The ratio an LSTM's predicted change is added to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Base {
    /// The last step's ratio: a silent model holds the last value.
    Last,
    /// The median ratio of the last [`DEFAULT_MEDIAN_WINDOW`] steps (which
    /// may reach before the window): a silent model is `median`. Slowdowns
    /// drawn afresh each iteration (slow-worker, power-law) and noise around
    /// a steady speed leave the next step near it, not near the last one, so
    /// the network learns only what departs from it.
    Median,
}

impl Base {
    /// The base of models whose card has no `base`.
    fn before_the_setting() -> Self {
        Base::Last
    }

    /// The base ratio after `history` (a worker's steps, oldest first);
    /// non-finite ratios are left out, `None` when none is left.
    pub fn of(self, history: &[Step]) -> Option<f64> {
        match self {
            Base::Last => history.last().map(|s| s.ratio).filter(|r| r.is_finite()),
            Base::Median => {
                super::median_ratio(&history[history.len().saturating_sub(DEFAULT_MEDIAN_WINDOW)..])
            }
        }
    }
}

impl Default for LstmSettings {
    fn default() -> Self {
        Self {
            window: 8,
            hidden: 16,
            max_epochs: 40,
            patience: 5,
            batch: 128,
            learning_rate: 3e-3,
            validation: 0.2,
            seed: 42,
            max_windows: 20_000,
            base: Base::Median,
        }
    }
}

/// What training did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainReport {
    /// Training windows.
    pub train_windows: usize,
    /// Validation windows.
    pub validation_windows: usize,
    /// Epochs run.
    pub epochs: usize,
    /// Epoch whose weights were kept (1-based).
    pub best_epoch: usize,
    /// Validation L1 loss (standardised units) before training.
    pub initial_validation_loss: f64,
    /// Validation L1 loss of the kept weights.
    pub validation_loss: f64,
    /// Validation mean absolute error of the ratio when holding the last value.
    pub validation_mae_last: f64,
    /// Validation mean absolute error of the ratio with the kept weights.
    pub validation_mae: f64,
}

/// The model card: everything needed to rebuild and trust the weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    /// Always `"forestall-lstm-model"`.
    pub format: String,
    /// Feature-set name ([`FEATURE_SET`]).
    pub feature_set: String,
    /// Feature names ([`FEATURES`]).
    pub features: Vec<String>,
    /// Settings it was trained with.
    pub settings: LstmSettings,
    /// Per-feature mean of the training windows.
    pub mean: Vec<f64>,
    /// Per-feature standard deviation of the training windows.
    pub std: Vec<f64>,
    /// Standard deviation of the target (change of ratio from the base).
    pub target_std: f64,
    /// Traces it was trained on, with the share of each series used.
    pub trained_on: Vec<TrainedOn>,
    /// What training did.
    pub report: TrainReport,
}

/// One training trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainedOn {
    /// Trace directory as given.
    pub path: PathBuf,
    /// Share of each series' steps used for training (the rest was never seen).
    pub share: f64,
}

/// Why training, saving or loading failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LstmError {
    /// A setting cannot work.
    #[error("lstm setting {name}: {message}")]
    Setting {
        /// Setting.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The window is longer than every training series.
    #[error("window of {window} steps is longer than every training series (longest {longest} steps usable); use a shorter --window or longer traces")]
    WindowTooLong {
        /// Window.
        window: usize,
        /// Longest usable series.
        longest: usize,
    },
    /// Too few windows to train and validate.
    #[error("{windows} windows: too few to train and validate an LSTM (need at least 20)")]
    TooFewWindows {
        /// Windows available.
        windows: usize,
    },
    /// Training diverged.
    #[error("training diverged (loss {loss} at epoch {epoch}); lower --learning-rate")]
    Diverged {
        /// Epoch.
        epoch: usize,
        /// Loss.
        loss: f64,
    },
    /// The model directory cannot be read or written.
    #[error("{path}: {cause}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause (in the message, not chained: printed once).
        cause: std::io::Error,
    },
    /// The model card is not one of ours.
    #[error("{path}: not a forestall LSTM model card: {message}")]
    Card {
        /// File.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The model was trained on another feature set.
    #[error("{path}: model trained on feature set {found} ({found_features}); this build reads {expected} ({expected_features}); retrain it with `forestall predictor train`")]
    FeatureSet {
        /// File.
        path: PathBuf,
        /// Its feature set.
        found: String,
        /// Its features.
        found_features: String,
        /// Ours.
        expected: &'static str,
        /// Our features.
        expected_features: String,
    },
    /// The weights file does not fit the card.
    #[error("{path}: weights do not load: {message}")]
    Weights {
        /// File.
        path: PathBuf,
        /// burn's message.
        message: String,
    },
}

/// The burn network: an LSTM and a linear head on its last hidden state.
#[derive(Module, Debug)]
struct Net {
    lstm: Lstm,
    head: Linear,
}

impl Net {
    fn new(settings: &LstmSettings, device: &Device) -> Self {
        Self {
            lstm: LstmConfig::new(N_FEATURES, settings.hidden, true).init(device),
            head: LinearConfig::new(settings.hidden, 1).init(device),
        }
    }

    /// `[batch, window, features]` → `[batch, 1]`.
    fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        let (_, state) = self.lstm.forward(x, None);
        self.head.forward(state.hidden)
    }
}

/// A trained LSTM predictor.
#[derive(Debug, Clone)]
pub struct LstmPredictor {
    card: ModelCard,
    cell: PlainLstm,
}

/// One gate's weights: `x·wx + h·wh + b`, row-major `[in, hidden]`.
#[derive(Debug, Clone, PartialEq)]
struct Gate {
    wx: Vec<f32>,
    wh: Vec<f32>,
    b: Vec<f32>,
}

/// The LSTM's weights as plain vectors, for inference without burn.
#[derive(Debug, Clone, PartialEq)]
struct PlainLstm {
    hidden: usize,
    input: Gate,
    forget: Gate,
    output: Gate,
    cell: Gate,
    head_w: Vec<f32>,
    head_b: f32,
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap_or_default()
}

fn linear_weights(l: &Linear) -> (Vec<f32>, Vec<f32>) {
    let w = values(l.weight.val());
    let b = l.bias.as_ref().map(|b| values(b.val())).unwrap_or_default();
    (w, b)
}

fn gate(g: &burn::nn::GateController) -> Gate {
    let (wx, bx) = linear_weights(&g.input_transform);
    let (wh, bh) = linear_weights(&g.hidden_transform);
    let b = bx
        .iter()
        .zip(bh.iter().chain(std::iter::repeat(&0.0)))
        .map(|(a, c)| a + c)
        .collect();
    Gate { wx, wh, b }
}

impl PlainLstm {
    fn from_net(net: &Net) -> Self {
        let lstm = &net.lstm;
        let input = gate(&lstm.input_gate);
        let forget = lstm
            .forget_gate
            .as_ref()
            .map_or_else(|| input.clone(), gate);
        let (head_w, head_b) = linear_weights(&net.head);
        Self {
            hidden: lstm.d_hidden,
            input,
            forget,
            output: gate(&lstm.output_gate),
            cell: gate(&lstm.cell_gate),
            head_w,
            head_b: head_b.first().copied().unwrap_or(0.0),
        }
    }

    /// The head's output for one standardised window (`[window × features]`).
    fn forward(&self, x: &[f32]) -> f32 {
        let hd = self.hidden;
        let mut h = vec![0.0f32; hd];
        let mut c = vec![0.0f32; hd];
        let mut pre = [
            vec![0.0f32; hd],
            vec![0.0f32; hd],
            vec![0.0f32; hd],
            vec![0.0f32; hd],
        ];
        for xt in x.chunks(N_FEATURES) {
            for (out, g) in
                pre.iter_mut()
                    .zip([&self.input, &self.forget, &self.output, &self.cell])
            {
                out.copy_from_slice(&g.b);
                for (i, &xi) in xt.iter().enumerate() {
                    let row = &g.wx[i * hd..(i + 1) * hd];
                    out.iter_mut().zip(row).for_each(|(o, w)| *o += xi * w);
                }
                for (i, &hi) in h.iter().enumerate() {
                    let row = &g.wh[i * hd..(i + 1) * hd];
                    out.iter_mut().zip(row).for_each(|(o, w)| *o += hi * w);
                }
            }
            for j in 0..hd {
                let i = sigmoid(pre[0][j]);
                let f = sigmoid(pre[1][j]);
                let o = sigmoid(pre[2][j]);
                let g = pre[3][j].tanh();
                c[j] = f * c[j] + i * g;
                h[j] = o * c[j].tanh();
            }
        }
        self.head_b + h.iter().zip(&self.head_w).map(|(a, b)| a * b).sum::<f32>()
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The raw features of one step.
fn step_features(s: &Step) -> [f64; N_FEATURES] {
    [
        s.ratio,
        s.wait_ratio,
        s.share * f64::from(s.workers.max(1)),
        s.spread,
    ]
}

/// The last `window` steps of `history`, the oldest repeated in front when it is
/// shorter, standardised; `None` for an empty history.
fn window_input(history: &[Step], window: usize, mean: &[f64], std: &[f64]) -> Option<Vec<f32>> {
    let first = history.first()?;
    let pad = window.saturating_sub(history.len());
    let tail = &history[history.len().saturating_sub(window)..];
    let mut x = Vec::with_capacity(window * N_FEATURES);
    for s in std::iter::repeat_n(first, pad).chain(tail) {
        x.extend(standardise(&step_features(s), mean, std));
    }
    Some(x)
}

/// One step's features, standardised.
fn standardise<'a>(
    step: &'a [f64],
    mean: &'a [f64],
    std: &'a [f64],
) -> impl Iterator<Item = f32> + 'a {
    step.iter()
        .zip(mean.iter().zip(std))
        .map(|(v, (m, s))| ((v - m) / s) as f32)
}

/// A training or validation window.
struct Sample {
    /// Raw features, `[window × features]`.
    x: Vec<f64>,
    /// Ratio of the last step of the window.
    last: f64,
    /// The base ratio after the window's steps ([`LstmSettings::base`]).
    base: f64,
    /// Ratio of the step after it (the target).
    next: f64,
}

/// Cuts the windows of `series` whose target lies in `steps[window..end(s)]`,
/// the latest `validation` share of each series' targets to validation.
fn cut(
    series: &[WorkerSeries],
    settings: &LstmSettings,
    end: &dyn Fn(&WorkerSeries) -> usize,
) -> Result<(Vec<Sample>, Vec<Sample>), LstmError> {
    let w = settings.window;
    let longest = series
        .iter()
        .map(|s| end(s).min(s.steps.len()))
        .max()
        .unwrap_or(0);
    if longest <= w {
        return Err(LstmError::WindowTooLong { window: w, longest });
    }
    let (mut train, mut val) = (Vec::new(), Vec::new());
    for s in series {
        let end = end(s).min(s.steps.len());
        if end <= w {
            continue;
        }
        let targets = end - w;
        let split = w + targets - ((targets as f64 * settings.validation).round() as usize);
        for t in w..end {
            let x = s.steps[t - w..t].iter().flat_map(step_features).collect();
            let sample = Sample {
                x,
                last: s.steps[t - 1].ratio,
                base: settings
                    .base
                    .of(&s.steps[..t])
                    .unwrap_or(s.steps[t - 1].ratio),
                next: s.steps[t].ratio,
            };
            if t < split {
                train.push(sample);
            } else {
                val.push(sample);
            }
        }
    }
    // Thin evenly when there are too many (every k-th window of the time-ordered list).
    if train.len() > settings.max_windows {
        let stride = train.len().div_ceil(settings.max_windows);
        train = train.into_iter().step_by(stride).collect();
    }
    if train.len() + val.len() < 20 || val.is_empty() {
        return Err(LstmError::TooFewWindows {
            windows: train.len() + val.len(),
        });
    }
    Ok((train, val))
}

fn check(settings: &LstmSettings) -> Result<(), LstmError> {
    let bad = |name, message: &str| {
        Err(LstmError::Setting {
            name,
            message: message.to_string(),
        })
    };
    if settings.window == 0 {
        return bad("window", "must be at least 1");
    }
    if settings.hidden == 0 {
        return bad("hidden", "must be at least 1");
    }
    if settings.max_epochs == 0 {
        return bad("max_epochs", "must be at least 1");
    }
    if settings.batch == 0 {
        return bad("batch", "must be at least 1");
    }
    if !(settings.learning_rate.is_finite() && settings.learning_rate > 0.0) {
        return bad("learning_rate", "must be a positive number");
    }
    if !(settings.validation > 0.0 && settings.validation < 0.5) {
        return bad("validation", "must be in (0, 0.5)");
    }
    if settings.max_windows < 20 {
        return bad("max_windows", "must be at least 20");
    }
    Ok(())
}

/// Mean and deviation of each feature over `samples`.
fn moments(samples: &[Sample]) -> (Vec<f64>, Vec<f64>, f64) {
    let mut sum = [0.0; N_FEATURES];
    let mut sq = [0.0; N_FEATURES];
    let mut n: f64 = 0.0;
    let (mut ts, mut tsq) = (0.0, 0.0);
    for s in samples {
        for step in s.x.chunks(N_FEATURES) {
            for k in 0..N_FEATURES {
                sum[k] += step[k];
                sq[k] += step[k] * step[k];
            }
            n += 1.0;
        }
        let d = s.next - s.base;
        ts += d;
        tsq += d * d;
    }
    let m = samples.len().max(1) as f64;
    let mean: Vec<f64> = sum.iter().map(|s| s / n.max(1.0)).collect();
    let std = sq
        .iter()
        .zip(&mean)
        .map(|(q, mu)| (q / n.max(1.0) - mu * mu).max(0.0).sqrt().max(STD_FLOOR))
        .collect();
    let target_std = (tsq / m - (ts / m) * (ts / m)).max(0.0).sqrt().max(1e-6);
    (mean, std, target_std)
}

/// Batch tensors from `samples[idx]`: standardised inputs and targets.
fn batch(
    samples: &[Sample],
    idx: &[usize],
    card: &ModelCard,
    device: &Device,
) -> (Tensor<3>, Tensor<2>) {
    let w = card.settings.window;
    let mut xs = Vec::with_capacity(idx.len() * w * N_FEATURES);
    let mut ys = Vec::with_capacity(idx.len());
    for &i in idx {
        let s = &samples[i];
        for step in s.x.chunks(N_FEATURES) {
            xs.extend(standardise(step, &card.mean, &card.std));
        }
        ys.push(((s.next - s.base) / card.target_std) as f32);
    }
    let x = Tensor::<3>::from_data(TensorData::new(xs, [idx.len(), w, N_FEATURES]), device);
    let y = Tensor::<2>::from_data(TensorData::new(ys, [idx.len(), 1]), device);
    (x, y)
}

/// Validation L1 loss (standardised) and MAE of the ratio.
fn validate(net: &Net, samples: &[Sample], card: &ModelCard, device: &Device) -> (f64, f64) {
    let mut loss = 0.0;
    for chunk in (0..samples.len()).collect::<Vec<_>>().chunks(1024) {
        let (x, y) = batch(samples, chunk, card, device);
        let out = net.forward(x);
        loss += f64::from((out - y).abs().sum().into_scalar::<f32>());
    }
    let loss = loss / samples.len() as f64;
    (loss, loss * card.target_std)
}

impl LstmPredictor {
    /// Trains on the windows of `series` whose targets lie before `end(s)` in
    /// each series (the rest is never seen); `trained_on` is recorded in the card.
    pub fn train(
        series: &[WorkerSeries],
        end: &dyn Fn(&WorkerSeries) -> usize,
        settings: &LstmSettings,
        trained_on: Vec<TrainedOn>,
        mut progress: impl FnMut(usize, f64),
    ) -> Result<Self, LstmError> {
        check(settings)?;
        let (train, val) = cut(series, settings, end)?;
        let (mean, std, target_std) = moments(&train);
        let mut card = ModelCard {
            format: CARD_FORMAT.to_string(),
            feature_set: FEATURE_SET.to_string(),
            features: FEATURES.iter().map(|f| f.to_string()).collect(),
            settings: settings.clone(),
            mean,
            std,
            target_std,
            trained_on,
            report: TrainReport {
                train_windows: train.len(),
                validation_windows: val.len(),
                epochs: 0,
                best_epoch: 0,
                initial_validation_loss: 0.0,
                validation_loss: 0.0,
                validation_mae_last: val.iter().map(|s| (s.next - s.last).abs()).sum::<f64>()
                    / val.len() as f64,
                validation_mae: 0.0,
            },
        };
        let device = Device::flex().autodiff();
        let mut net = {
            let _init = INIT
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            device.seed(settings.seed);
            Net::new(settings, &device)
        };
        let mut optim = AdamConfig::new().init();
        let (initial, _) = validate(&net.valid(), &val, &card, &device.clone().inner());
        card.report.initial_validation_loss = initial;
        let mut best = (initial, 0usize, PlainLstm::from_net(&net));
        let mut order: Vec<usize> = (0..train.len()).collect();
        for epoch in 1..=settings.max_epochs {
            let mut rng = KeyedRng::new(&[settings.seed, epoch as u64]);
            rng.shuffle(&mut order);
            for idx in order.chunks(settings.batch) {
                let (x, y) = batch(&train, idx, &card, &device);
                let loss = (net.forward(x) - y).abs().mean();
                let grads = GradientsParams::from_grads(loss.backward(), &net);
                net = optim.step(settings.learning_rate, net, grads);
            }
            let (loss, _) = validate(&net.valid(), &val, &card, &device.clone().inner());
            card.report.epochs = epoch;
            if !loss.is_finite() {
                return Err(LstmError::Diverged { epoch, loss });
            }
            progress(epoch, loss);
            if loss < best.0 {
                best = (loss, epoch, PlainLstm::from_net(&net));
            } else if epoch - best.1 >= settings.patience {
                break;
            }
        }
        card.report.best_epoch = best.1;
        card.report.validation_loss = best.0;
        card.report.validation_mae = best.0 * card.target_std;
        Ok(Self { card, cell: best.2 })
    }

    /// The model card.
    pub fn card(&self) -> &ModelCard {
        &self.card
    }

    /// Writes `dir/model.json` and `dir/weights.bpk` (the directory must exist).
    pub fn save(&self, dir: &Path) -> Result<(), LstmError> {
        let card_path = dir.join(CARD_FILE);
        let json = serde_json::to_string_pretty(&self.card).map_err(|e| LstmError::Card {
            path: card_path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&card_path, json + "\n").map_err(|cause| LstmError::Io {
            path: card_path,
            cause,
        })?;
        let weights = dir.join(WEIGHTS_FILE);
        self.to_net(&Device::flex())
            .save_file(&weights)
            .map_err(|e| LstmError::Weights {
                path: weights,
                message: e.to_string(),
            })
    }

    /// Reads a model directory written by [`LstmPredictor::save`].
    pub fn load(dir: &Path) -> Result<Self, LstmError> {
        let card_path = dir.join(CARD_FILE);
        let text = std::fs::read_to_string(&card_path).map_err(|cause| LstmError::Io {
            path: card_path.clone(),
            cause,
        })?;
        let card: ModelCard = serde_json::from_str(&text).map_err(|e| LstmError::Card {
            path: card_path.clone(),
            message: e.to_string(),
        })?;
        if card.format != CARD_FORMAT {
            return Err(LstmError::Card {
                path: card_path,
                message: format!("format is {:?}, expected {CARD_FORMAT:?}", card.format),
            });
        }
        if card.feature_set != FEATURE_SET || card.features != FEATURES {
            return Err(LstmError::FeatureSet {
                path: card_path,
                found: card.feature_set.clone(),
                found_features: card.features.join(", "),
                expected: FEATURE_SET,
                expected_features: FEATURES.join(", "),
            });
        }
        let sane = card.mean.len() == N_FEATURES
            && card.std.len() == N_FEATURES
            && card
                .std
                .iter()
                .chain([&card.target_std])
                .all(|s| s.is_finite() && *s > 0.0)
            && card.mean.iter().all(|m| m.is_finite());
        if !sane || check(&card.settings).is_err() {
            return Err(LstmError::Card {
                path: card_path,
                message: "normalisation or settings are missing or not finite".into(),
            });
        }
        let weights = dir.join(WEIGHTS_FILE);
        let net = Net::new(&card.settings, &Device::flex())
            .try_load_file(&weights)
            .map_err(|e| LstmError::Weights {
                path: weights,
                message: e.to_string(),
            })?;
        Ok(Self {
            cell: PlainLstm::from_net(&net),
            card,
        })
    }

    /// A burn network holding this predictor's weights.
    fn to_net(&self, device: &Device) -> Net {
        let mut net = Net::new(&self.card.settings, device);
        let p = &self.cell;
        let hd = p.hidden;
        let set = |l: &mut Linear, w: &[f32], rows: usize, b: Option<&[f32]>| {
            l.weight = burn::module::Param::from_tensor(Tensor::from_data(
                TensorData::new(w.to_vec(), [rows, w.len() / rows.max(1)]),
                device,
            ));
            l.bias = b.map(|b| {
                burn::module::Param::from_tensor(Tensor::from_data(
                    TensorData::new(b.to_vec(), [b.len()]),
                    device,
                ))
            });
        };
        let lstm = &mut net.lstm;
        let zeros = vec![0.0f32; hd];
        for (g, plain) in [
            (&mut lstm.input_gate, &p.input),
            (&mut lstm.output_gate, &p.output),
            (&mut lstm.cell_gate, &p.cell),
        ] {
            set(
                &mut g.input_transform,
                &plain.wx,
                N_FEATURES,
                Some(&plain.b),
            );
            set(&mut g.hidden_transform, &plain.wh, hd, Some(&zeros));
        }
        if let Some(g) = lstm.forget_gate.as_mut() {
            set(
                &mut g.input_transform,
                &p.forget.wx,
                N_FEATURES,
                Some(&p.forget.b),
            );
            set(&mut g.hidden_transform, &p.forget.wh, hd, Some(&zeros));
        }
        set(&mut net.head, &p.head_w, hd, Some(&[p.head_b]));
        net
    }

    /// The predicted ratio for the next iteration, `None` when the model's
    /// output is not finite. It stays within the ratios the worker showed in
    /// the model's window: a model extrapolates the dynamics it was trained
    /// on, and on a cluster whose stragglers behave otherwise (one trained
    /// where slow workers recover, reading a worker slow for good) that
    /// costs more than holding the last value; within the window's range it
    /// can still call a recovery the worker has shown it can make (a ratio
    /// it had), but not invent a slowdown or a speed it never had.
    fn next_ratio(&self, history: &[Step]) -> Option<f64> {
        self.last_and_next(history).map(|(_, next)| next)
    }

    /// The last ratio and the model's next one (as [`Self::next_ratio`]).
    pub(crate) fn last_and_next(&self, history: &[Step]) -> Option<(f64, f64)> {
        let last = history.last()?.ratio;
        let window = self.card.settings.window;
        let seen = &history[history.len().saturating_sub(window)..];
        let base = self.card.settings.base.of(history).unwrap_or(last);
        let x = window_input(history, window, &self.card.mean, &self.card.std)?;
        let delta = f64::from(self.cell.forward(&x)) * self.card.target_std;
        let r = base + delta;
        if !r.is_finite() {
            return None;
        }
        let (lo, hi) = seen.iter().fold((last, last), |(lo, hi), s| {
            (lo.min(s.ratio), hi.max(s.ratio))
        });
        Some((last, r.clamp(lo, hi).max(0.0)))
    }
}

impl Predictor for LstmPredictor {
    /// The model alone; `lstm` is the model with its online gain
    /// ([`CalibratedLstm`]).
    fn name(&self) -> &str {
        "lstm-uncalibrated"
    }

    /// The next iteration's ratio, held for the rest of the horizon. An empty
    /// history predicts the median (1.0); a non-finite output falls back to
    /// the last observed ratio.
    fn predict(&self, history: &[Step], horizon: usize) -> Vec<f64> {
        let r = match history.last() {
            None => 1.0,
            Some(last) => self.next_ratio(history).unwrap_or(last.ratio),
        };
        vec![r; horizon]
    }
}

#[cfg(test)]
pub(crate) mod tests;
