//! The net's layers on `f32` slices, each forward keeping what its backward
//! reads: the convolutions (gathered products, or Winograd's for more than
//! one input channel, with their pool, bias, ReLU and dropout), the LSTM's
//! input product, and the head with the loss. The
//! recurrence between them is [`LstmTape`](super::lstm::LstmTape).
//!
//! These are the operations of `Net::forward` (burn's tensors, the
//! reference the tests check them against) with both passes written out:
//! the products run in the `gemm` kernels on buffers of their own, with no
//! autodiff graph, and the gathers, pools and their backward scatters are
//! loops over rows. Activations are rows `[positions · batch, channels]`
//! (one row per position of each image, positions in their computed order,
//! images inside), as `Net::features` holds them.

use std::ops::Range;

use super::conv::{pool_index, positions};
use super::gemm::{product_into, product_of, View};
use super::weights::ConvWeights;
use super::{CnnConfig, Dropout};

use super::activation::sigmoid;

/// The sum of each column of `m`, rows of `cols` values, in row order: a
/// bias's gradient.
fn column_sums(m: &[f32], cols: usize) -> Vec<f32> {
    let mut sums = vec![0.0f32; cols];
    for row in m.chunks_exact(cols) {
        for (s, &d) in sums.iter_mut().zip(row) {
            *s += d;
        }
    }
    sums
}

/// The images `[n · side²]` (image after image) as rows `[side² · n, 1]`:
/// the first convolution's input.
pub(super) fn image_rows(pixels: &[f32], n: usize, side: usize) -> Vec<f32> {
    let map = side * side;
    let mut rows = vec![0.0; map * n];
    for (image, values) in pixels.chunks_exact(map).enumerate() {
        for (p, &v) in values.iter().enumerate() {
            rows[p * n + image] = v;
        }
    }
    rows
}

/// A convolution's input and output shape.
#[derive(Clone, Copy)]
struct Shape {
    /// Side of the input map.
    side: usize,
    kernel: usize,
    batch: usize,
}

impl Shape {
    /// The input coordinate that output coordinate `v` reads at kernel
    /// offset `d`, or None in the "same" padding (`(kernel − 1) / 2`
    /// before, the rest after).
    fn inside(&self, v: usize, d: usize) -> Option<usize> {
        (v + d)
            .checked_sub((self.kernel - 1) / 2)
            .filter(|&r| r < self.side)
    }

    /// The gathered input `[out.len() · batch, kernel² · c]` of `x`, rows
    /// `[side² · batch, c]`: for every output row (position in `out` order,
    /// image inside), the input rows of its taps `(di, dj)` in order, zeros
    /// in the padding. Written once each, in order.
    fn gather(&self, out: &[(usize, usize)], x: &[f32], c: usize) -> Vec<f32> {
        let (side, kernel, n) = (self.side, self.kernel, self.batch);
        let mut cols = Vec::with_capacity(out.len() * n * kernel * kernel * c);
        for &(i, j) in out {
            for image in 0..n {
                for di in 0..kernel {
                    let Some(r) = self.inside(i, di) else {
                        cols.resize(cols.len() + kernel * c, 0.0);
                        continue;
                    };
                    for dj in 0..kernel {
                        let source = self.inside(j, dj).map(|q| (r * side + q) * n + image);
                        match (source, c) {
                            // one channel (the first convolution): a value,
                            // not a copy of a slice
                            (Some(s), 1) => cols.push(x[s]),
                            (None, 1) => cols.push(0.0),
                            (Some(s), _) => cols.extend_from_slice(&x[s * c..(s + 1) * c]),
                            (None, _) => cols.resize(cols.len() + c, 0.0),
                        }
                    }
                }
            }
        }
        cols
    }

    /// The output rows in runs that read the same kernel rows `di` (the
    /// others fall in the padding for every position of the run): each
    /// run's rows and the columns of the gathered input, `[di_lo · kernel ·
    /// c, di_hi · kernel · c)`, that its products need. On a 7 × 7 map a
    /// 5 × 5 kernel reads a sixth of its taps' rows in the padding; the
    /// products leave them out.
    fn runs(&self, out: &[(usize, usize)], c: usize) -> Vec<(Range<usize>, Range<usize>)> {
        let (kernel, n) = (self.kernel, self.batch);
        let mut runs: Vec<(Range<usize>, Range<usize>)> = Vec::new();
        for (p, &(i, _)) in out.iter().enumerate() {
            let lo = (0..kernel)
                .find(|&d| self.inside(i, d).is_some())
                .unwrap_or(0);
            let hi = (0..kernel)
                .rev()
                .find(|&d| self.inside(i, d).is_some())
                .map_or(0, |d| d + 1);
            let columns = lo * kernel * c..hi * kernel * c;
            match runs.last_mut() {
                Some((rows, cols)) if *cols == columns && rows.end == p * n => rows.end += n,
                _ => runs.push((p * n..(p + 1) * n, columns)),
            }
        }
        runs
    }

    /// For every output row (position in `out` order, image inside) and
    /// tap `t` (`di · kernel + dj`) it reads, `f(row, t, input row)`; the
    /// taps that fall in the "same" padding are left out.
    fn each_read(&self, out: &[(usize, usize)], mut f: impl FnMut(usize, usize, usize)) {
        let (side, kernel, n) = (self.side, self.kernel, self.batch);
        for (p, &(i, j)) in out.iter().enumerate() {
            for di in 0..kernel {
                let Some(r) = self.inside(i, di) else {
                    continue;
                };
                for dj in 0..kernel {
                    let Some(q) = self.inside(j, dj) else {
                        continue;
                    };
                    let source = (r * side + q) * n;
                    for image in 0..n {
                        f(p * n + image, di * kernel + dj, source + image);
                    }
                }
            }
        }
    }
}

/// A convolution's input as its backward pass reads it.
enum Kept {
    /// Gathered (the first convolution's single channel, or a kernel
    /// [`Winograd`](super::winograd::Winograd) does not take): the
    /// gathered input `[rows, kernel² · channels]` and its
    /// [`Shape::runs`].
    Gathered {
        cols: Vec<f32>,
        runs: Vec<(Range<usize>, Range<usize>)>,
    },
    /// Transformed into tiles (`V` of
    /// [`Winograd::forward`](super::winograd::Winograd::forward)), and each
    /// output position's place in `out` (`usize::MAX`: not computed).
    Tiles { v: Vec<f32>, row_of: Vec<usize> },
}

/// A convolution's forward, kept for its backward.
pub(super) struct ConvTape {
    layer: usize,
    shape: Shape,
    /// Output positions, in row order (before the pool).
    out: Vec<(usize, usize)>,
    /// What the backward pass reads of the input.
    input: Kept,
    /// Where each pooled value came from in the product's output.
    pool: Option<Vec<i64>>,
    /// After the bias and the ReLU: `[pooled rows, filters]`.
    act: Vec<f32>,
    /// The dropout mask it was multiplied by.
    mask: Option<Vec<f32>>,
}

impl ConvTape {
    /// Convolution `layer` on `x`, the rows of the map before it (side
    /// `side`; for the first, [`image_rows`]), with its pool and dropout:
    /// its output rows, the side of its map, and the tape.
    pub(super) fn forward(
        w: &ConvWeights,
        layer: usize,
        x: &[f32],
        (side, batch): (usize, usize),
        config: &CnnConfig,
        dropout: Option<&Dropout>,
    ) -> (Vec<f32>, usize, Self) {
        let shape = Shape {
            side,
            kernel: config.kernel,
            batch,
        };
        let pooled = config.pool_after[layer];
        let out = positions(side, pooled);
        let c = w.channels;
        let k = shape.kernel * shape.kernel * c;
        let rows = out.len() * batch;
        debug_assert_eq!(x.len(), side * side * batch * c);
        let f = w.filters;
        let (y, input) = match &w.winograd {
            Some((t, u)) => {
                let mut row_of = vec![usize::MAX; side * side];
                for (p, &(i, j)) in out.iter().enumerate() {
                    row_of[i * side + j] = p;
                }
                let (y, v) = t.forward(x, u, (side, batch, c, f), &row_of);
                (y, Kept::Tiles { v, row_of })
            }
            None => {
                let cols = shape.gather(&out, x, c);
                let runs = shape.runs(&out, c);
                let mut y = vec![0.0f32; rows * f];
                for (r, cs) in &runs {
                    product_into(
                        &mut y[r.start * f..],
                        f,
                        (
                            View::block(&cols[r.start * k + cs.start..], r.len(), cs.len(), k),
                            View::rows(&w.w[cs.start * f..cs.end * f], cs.len(), f),
                        ),
                        false,
                    );
                }
                (y, Kept::Gathered { cols, runs })
            }
        };
        let (pool, mut act, side_out) = if pooled {
            let index = pool_index(&y, rows / 4 * f);
            let values = index.iter().map(|&i| y[i as usize]).collect();
            (Some(index), values, side / 2)
        } else {
            (None, y, side)
        };
        for row in act.chunks_exact_mut(f) {
            for (v, &b) in row.iter_mut().zip(&w.b) {
                let z = *v + b;
                // ReLU; NaN passes, as burn's does
                *v = if z <= 0.0 { 0.0 } else { z };
            }
        }
        let mask = match dropout.filter(|d| d.rate > 0.0) {
            Some(d) if pooled => Some(d.mask(layer, side_out * side_out, f)),
            _ => None,
        };
        let output = match &mask {
            Some(m) => act.iter().zip(m).map(|(a, m)| a * m).collect(),
            None => act.clone(),
        };
        let tape = Self {
            layer,
            shape,
            out,
            input,
            pool,
            act,
            mask,
        };
        (output, side_out, tape)
    }

    /// The gradients of the convolution's weights (in [`ConvWeights::w`]'s
    /// layout) and bias from `d_out`, its output's, and with `input` that
    /// of its input rows.
    pub(super) fn backward(
        &self,
        w: &ConvWeights,
        d_out: &[f32],
        input: bool,
    ) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
        let f = w.filters;
        let c = w.channels;
        let k = self.shape.kernel * self.shape.kernel * c;
        let rows = self.out.len() * self.shape.batch;
        debug_assert_eq!(d_out.len(), self.act.len());
        // through the dropout and the ReLU
        let mut d_pre: Vec<f32> = match &self.mask {
            Some(m) => d_out.iter().zip(m).map(|(d, m)| d * m).collect(),
            None => d_out.to_vec(),
        };
        for (d, &a) in d_pre.iter_mut().zip(&self.act) {
            if a <= 0.0 {
                *d = 0.0;
            }
        }
        let d_b = column_sums(&d_pre, f);
        // through the pool: each value back to where it was picked
        let d_y = match &self.pool {
            Some(index) => {
                let mut d_y = vec![0.0f32; rows * f];
                for (&i, &d) in index.iter().zip(&d_pre) {
                    d_y[i as usize] = d;
                }
                d_y
            }
            None => d_pre,
        };
        let (cols, runs) = match &self.input {
            Kept::Gathered { cols, runs } => (cols, runs),
            Kept::Tiles { v, row_of } => {
                let (t, u) = w
                    .winograd
                    .as_ref()
                    .expect("tiles come from Winograd's weights");
                let shape = (self.shape.side, self.shape.batch, c, f);
                let (d_w, d_x) = t.backward(&d_y, (v, u), shape, row_of, input);
                return (d_w, d_b, d_x);
            }
        };
        let mut d_w = vec![0.0f32; k * f];
        for (r, cs) in runs {
            let block = View::block(&cols[r.start * k + cs.start..], r.len(), cs.len(), k);
            let d_y_run = View::rows(&d_y[r.start * f..r.end * f], r.len(), f);
            product_into(&mut d_w[cs.start * f..], f, (block.t(), d_y_run), true);
        }
        let d_x = input.then(|| {
            // the columns a run leaves out are taps in the padding, which
            // the scatter does not read
            let mut d_cols = vec![0.0f32; rows * k];
            for (r, cs) in runs {
                product_into(
                    &mut d_cols[r.start * k + cs.start..],
                    k,
                    (
                        View::rows(&d_y[r.start * f..r.end * f], r.len(), f),
                        View::rows(&w.w[cs.start * f..cs.end * f], cs.len(), f).t(),
                    ),
                    false,
                );
            }
            let side = self.shape.side;
            let mut d_x = vec![0.0f32; side * side * self.shape.batch * c];
            self.shape.each_read(&self.out, |row, t, source| {
                let from = &d_cols[row * k + t * c..row * k + (t + 1) * c];
                for (to, &d) in d_x[source * c..(source + 1) * c].iter_mut().zip(from) {
                    *to += d;
                }
            });
            d_x
        });
        (d_w, d_b, d_x)
    }

    /// Which convolution it is.
    pub(super) fn layer(&self) -> usize {
        self.layer
    }
}

/// The LSTM's input product `z_x = x · W_x + b` on `x`, rows `[steps ·
/// batch, features]`: `[steps · batch, 4 · hidden]`.
pub(super) fn lstm_input(w_x: &[f32], b_x: &[f32], x: &[f32]) -> Vec<f32> {
    let gates = b_x.len();
    let features = w_x.len() / gates.max(1);
    let rows = x.len() / features.max(1);
    let mut z = product_of(
        View::rows(x, rows, features),
        View::rows(w_x, features, gates),
    );
    for row in z.chunks_exact_mut(gates) {
        for (v, &b) in row.iter_mut().zip(b_x) {
            *v += b;
        }
    }
    z
}

/// The backward of [`lstm_input`] from `d_z`: the gradients of `W_x`
/// (`[features, gates]`), of `b` and of `x`.
pub(super) fn lstm_input_backward(
    w_x: &[f32],
    gates: usize,
    x: &[f32],
    d_z: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let features = w_x.len() / gates.max(1);
    let rows = x.len() / features.max(1);
    let d_w = product_of(
        View::rows(x, rows, features).t(),
        View::rows(d_z, rows, gates),
    );
    let d_b = column_sums(d_z, gates);
    let d_x = product_of(
        View::rows(d_z, rows, gates),
        View::rows(w_x, features, gates).t(),
    );
    (d_w, d_b, d_x)
}

/// The head's logits `z = h · w + b` of `h`, `[n, hidden]`: `[n]`.
pub(super) fn head(w: &[f32], b: f32, h: &[f32]) -> Vec<f32> {
    let hidden = w.len();
    let n = h.len() / hidden.max(1);
    let mut z = product_of(View::rows(h, n, hidden), View::rows(w, hidden, 1));
    for v in &mut z {
        *v += b;
    }
    z
}

/// Σ_i w_i · BCE(σ(z_i), y_i) on logits, stably: max(z, 0) − y·z + ln(1 +
/// e^−|z|), each term in f32 and summed in order.
pub(super) fn loss_sum(z: &[f32], y: &[f32], w: &[f32]) -> f64 {
    z.iter()
        .zip(y)
        .zip(w)
        .map(|((&z, &y), &w)| {
            let bce = z.max(0.0) - z * y + (-z.abs()).exp().ln_1p();
            f64::from(bce * w)
        })
        .sum()
}

/// The backward of the loss and the head from the logits `z`: the
/// gradients of the head's weights and bias, and of `h`.
pub(super) fn head_backward(
    head_w: &[f32],
    h: &[f32],
    (z, y, w): (&[f32], &[f32], &[f32]),
) -> (Vec<f32>, f32, Vec<f32>) {
    let hidden = head_w.len();
    let n = z.len();
    // ∂L/∂z = (σ(z) − y) · w
    let d_z: Vec<f32> = z
        .iter()
        .zip(y)
        .zip(w)
        .map(|((&z, &y), &w)| (sigmoid(z) - y) * w)
        .collect();
    let d_w = product_of(View::rows(h, n, hidden).t(), View::rows(&d_z, n, 1));
    let d_b = d_z.iter().sum();
    let d_h = product_of(View::rows(&d_z, n, 1), View::rows(head_w, 1, hidden));
    (d_w, d_b, d_h)
}
