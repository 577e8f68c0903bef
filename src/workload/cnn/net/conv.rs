//! The net's convolutions as gathered matrix products: where each one reads
//! its input (`conv_rows_index`), the indices a thread keeps per batch size
//! (`Gathers`), and the product with its pool, bias and ReLU (`conv_rows`).

use std::cell::RefCell;
use std::rc::Rc;

use burn::nn::conv::Conv2d;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::CnnConfig;

/// Gather indices a thread keeps (`Gathers`): a few batch sizes (micro-batch,
/// evaluation batch, the last partial one) of gradients and predictions.
const KEPT_GATHERS: usize = 8;

/// Where each convolution reads its input, for one net, one batch size and
/// one kind of device (with autodiff or not), kept by the thread that built
/// it.
pub(super) struct Gathers {
    config: CnnConfig,
    pub(super) batch: usize,
    autodiff: bool,
    /// The first convolution's [`conv_rows_index`] of one image (the zero
    /// row is `side²`), repeated over the images by a gather in plain Rust:
    /// the images carry no gradient.
    pub(super) first: Vec<u32>,
    /// The other convolutions' [`conv_rows_index`], as burn index tensors.
    pub(super) rest: Vec<Tensor<1, Int>>,
}

thread_local! {
    /// Most recently used last.
    static GATHERS: RefCell<Vec<Rc<Gathers>>> = const { RefCell::new(Vec::new()) };
}

impl Gathers {
    /// This thread's indices for `config` at `batch` images on `device`,
    /// built on first use.
    pub(super) fn of(config: &CnnConfig, batch: usize, device: &Device) -> Rc<Self> {
        let autodiff = device.is_autodiff();
        let kept = GATHERS.with_borrow_mut(|kept| {
            let at = kept
                .iter()
                .position(|g| g.batch == batch && g.autodiff == autodiff && g.config == *config)?;
            let g = kept.remove(at);
            kept.push(Rc::clone(&g));
            Some(g)
        });
        if let Some(g) = kept {
            return g;
        }
        let mut side = config.side;
        let mut first = Vec::new();
        let mut rest = Vec::new();
        for (layer, &pooled) in config.pool_after.iter().enumerate() {
            if layer == 0 {
                // one image: its rows are the positions, the zero row is `side²`
                first = conv_rows_index(side, config.kernel, pooled, 1)
                    .into_iter()
                    .map(|r| u32::try_from(r).expect("an image has fewer than 2³² pixels"))
                    .collect();
            } else {
                let index = conv_rows_index(side, config.kernel, pooled, batch);
                let len = index.len();
                rest.push(Tensor::<1, Int>::from_data(
                    TensorData::new(index, [len]),
                    device,
                ));
            }
            if pooled {
                side /= 2;
            }
        }
        let g = Rc::new(Self {
            config: config.clone(),
            batch,
            autodiff,
            first,
            rest,
        });
        GATHERS.with_borrow_mut(|kept| {
            if kept.len() >= KEPT_GATHERS {
                kept.remove(0);
            }
            kept.push(Rc::clone(&g));
        });
        g
    }
}

/// Where the rows of a "same" convolution's gathered matrix come from, for
/// an input held as rows `[side² · batch, channels]` (position `p` of image
/// `n` at row `p · batch + n`) and one zero row after them (row `side² ·
/// batch`): for every output position `(i, j)` and image `n` (in that
/// order), then every kernel offset `(di, dj)`, the input row of position
/// `(i + di − pad, j + dj − pad)` of image `n`, or the zero row where that
/// falls outside the map. `pad` is burn's "same" padding at stride 1,
/// `(kernel − 1) / 2` before and the rest after. The output positions are
/// row-major, or, with `pooled`, only those a 2 × 2 pool at stride 2 reads,
/// grouped by their place `(a, b)` in the window: `(2i' + a, 2j' + b)` for
/// `a`, `b`, `i'`, `j'` in that order, so that each quarter of the rows is
/// one place of every window, the windows row-major.
fn conv_rows_index(side: usize, kernel: usize, pooled: bool, batch: usize) -> Vec<i64> {
    let positions = positions(side, pooled);
    let zero = (side * side * batch) as i64;
    let pad = (kernel - 1) / 2;
    let inside = |v: usize, d: usize| (v + d).checked_sub(pad).filter(|&r| r < side);
    let mut index = Vec::with_capacity(positions.len() * batch * kernel * kernel);
    for &(i, j) in &positions {
        for n in 0..batch {
            for di in 0..kernel {
                for dj in 0..kernel {
                    index.push(match (inside(i, di), inside(j, dj)) {
                        (Some(r), Some(q)) => ((r * side + q) * batch + n) as i64,
                        _ => zero,
                    });
                }
            }
        }
    }
    index
}

/// A convolution's output positions `(i, j)` in the order its rows are
/// computed (see [`conv_rows_index`]): row-major, or, with `pooled`, only
/// those a 2 × 2 pool at stride 2 reads, grouped by their place in the
/// window.
pub(super) fn positions(side: usize, pooled: bool) -> Vec<(usize, usize)> {
    if pooled {
        let half = side / 2;
        let mut p = Vec::with_capacity(4 * half * half);
        for a in 0..2 {
            for b in 0..2 {
                for i in 0..half {
                    for j in 0..half {
                        p.push((2 * i + a, 2 * j + b));
                    }
                }
            }
        }
        p
    } else {
        (0..side)
            .flat_map(|i| (0..side).map(move |j| (i, j)))
            .collect()
    }
}

/// A stride-1 convolution with "same" padding as one matrix product, then
/// its pool (if `pooled`), bias and ReLU: the gathered input `[rows, k² ·
/// in]` (columns `(di, dj, c)`, rows those of [`conv_rows_index`]) times the
/// weights `[out, in, k, k]` read as `[k² · in, out]`. The pool is the
/// maximum over the four quarters of the rows; it commutes with the bias
/// (the same for the four) and the ReLU, so both follow it.
///
/// # Shapes
/// - `cols`: `[rows, k² · in]`
/// - returns: `[rows, out]`, or `[rows / 4, out]` with `pooled`
pub(super) fn conv_rows(
    conv: &Conv2d,
    cols: Tensor<2>,
    channels: usize,
    pooled: bool,
) -> Tensor<2> {
    let [out, _, kernel, _] = conv.weight.dims();
    let taps = kernel * kernel;
    let w = conv
        .weight
        .val()
        .reshape([out, channels, taps])
        .swap_dims(1, 2)
        .reshape([out, taps * channels])
        .transpose(); // [(di, dj, c), out]
    let mut y = cols.matmul(w); // [rows, out]
    if pooled {
        let [rows, _] = y.dims();
        let device = y.device();
        let values = y.clone().inner().into_data();
        let values = values
            .as_slice::<f32>()
            .expect("the convolution's output is f32");
        let index = pool_index(values, rows / 4 * out);
        let len = index.len();
        let index = Tensor::<1, Int>::from_data(TensorData::new(index, [len]), &device);
        y = y
            .reshape([rows * out])
            .select(0, index)
            .reshape([rows / 4, out]);
    }
    let y = match &conv.bias {
        Some(bias) => y + bias.val().reshape([1, out]),
        None => y,
    };
    relu(y)
}

/// Where each maximum of a pool lies: for each of the `quarter` values of a
/// pooled map, the flat position (in `y`, the four quarters one after the
/// other) of the largest of its four candidates; the first of equal ones,
/// and the first NaN, as a maximum over the quarters (`max_dim`) picks. The
/// pool is then a `select` of these positions, whose backward pass adds each
/// gradient at its position: the values and gradients of `max_dim`, without
/// `flex`'s generic reduction over a leading axis, which cost several times
/// this loop.
pub(super) fn pool_index(v: &[f32], quarter: usize) -> Vec<i64> {
    debug_assert_eq!(v.len(), 4 * quarter);
    let (q0, rest) = v.split_at(quarter);
    let (q1, rest) = rest.split_at(quarter);
    let (q2, q3) = rest.split_at(quarter);
    let at = |q: usize, k: usize| (q * quarter + k) as i64;
    // without an early exit, so that the scan vectorises
    if v.iter().fold(false, |nan, x| nan | x.is_nan()) {
        return (0..quarter)
            .map(|k| {
                let candidates = [q0[k], q1[k], q2[k], q3[k]];
                let q = candidates
                    .iter()
                    .position(|x| x.is_nan())
                    .unwrap_or_else(|| {
                        (1..4).fold(0, |b, q| if candidates[q] > candidates[b] { q } else { b })
                    });
                at(q, k)
            })
            .collect();
    }
    // Without NaN, branch-free (a tree of strict comparisons keeps the
    // first of equal maxima): the pools' values are in no order a branch
    // predictor could follow, and the loop vectorises.
    let mut index = vec![0i64; quarter];
    for (k, (((i, &a), &b), (&c, &d))) in index
        .iter_mut()
        .zip(q0)
        .zip(q1)
        .zip(q2.iter().zip(q3))
        .enumerate()
    {
        let (first, max01) = if b > a { (1, b) } else { (0, a) };
        let (second, max23) = if d > c { (3, d) } else { (2, c) };
        let q: i64 = if max23 > max01 { second } else { first };
        *i = q * quarter as i64 + k as i64;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::pool_index;

    #[test]
    fn a_pool_picks_the_first_of_equal_maxima_and_the_first_nan() {
        // 3 pooled values, quarters one after the other
        let quarters = [
            [1.0f32, 5.0, 0.0],
            [2.0, 5.0, f32::NAN],
            [2.0, 7.0, 3.0],
            [-1.0, 7.0, f32::NAN],
        ];
        let y = quarters.concat();
        // value 0: 2.0 first in quarter 1; value 1: 7.0 first in quarter 2;
        // value 2: the first NaN, in quarter 1
        assert_eq!(pool_index(&y, 3), vec![3, 7, 5]);
        // without NaN (the branch-free path): ties inside and across halves
        let quarters = [
            [1.0f32, 0.0, 4.0, -0.0],
            [1.0, 2.0, 1.0, 0.0],
            [0.5, 2.0, 4.0, -1.0],
            [1.0, 3.0, 4.0, 0.0],
        ];
        let y = quarters.concat();
        assert_eq!(pool_index(&y, 4), vec![0, 13, 2, 3]);
    }

    /// The branch-free path picks what a plain first-maximum scan picks, on
    /// values with many ties (a few levels, both signs of zero).
    #[test]
    fn the_branch_free_pool_is_the_first_maximum() {
        let quarter = 4_096;
        let levels = [-1.0f32, -0.0, 0.0, 0.5, 1.0];
        let mut rng = crate::rng::KeyedRng::new(&[7]);
        let v: Vec<f32> = (0..4 * quarter)
            .map(|_| levels[(rng.next_u64() % levels.len() as u64) as usize])
            .collect();
        let expected: Vec<i64> = (0..quarter)
            .map(|k| {
                let mut best = k;
                for q in 1..4 {
                    if v[q * quarter + k] > v[best] {
                        best = q * quarter + k;
                    }
                }
                best as i64
            })
            .collect();
        assert_eq!(pool_index(&v, quarter), expected);
    }
}
