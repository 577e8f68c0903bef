//! Stride-1 "same" convolutions by Winograd's minimal filtering,
//! F(4 × 4, r × r) (Lavin and Gray, "Fast Algorithms for Convolutional
//! Neural Networks", 2016): each 4 × 4 block of outputs from an
//! `(r + 3) × (r + 3)` tile of the input as `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`.
//! Summed over the input channels, the element-wise products become one
//! matrix product per tile position ξ, `M[ξ] = V[ξ] · U[ξ]` (`V`: the tiles'
//! transforms, `[tiles · batch, channels]`; `U`: the weights',
//! `[channels, filters]`). For a 5 × 5 kernel that is 64 products per 16
//! outputs instead of 400 (F(2 × 2, 5 × 5), used until 2026-11-30, did
//! 36 per 4: a gradient call now costs about 0.7× what it cost with it,
//! and its rounding doubled, to about 10⁻⁵ of the output's largest
//! value; the tests bound both).
//!
//! The backward pass is this computation's own adjoint, every step
//! transposed: the output's gradient transformed (`dM = A dY Aᵀ`), then
//! `dU[ξ] = V[ξ]ᵀ · dM[ξ]` (to the weights' gradient through `Gᵀ … G`) and
//! `dV[ξ] = dM[ξ] · U[ξ]ᵀ` (to the input's through `B … Bᵀ`, tiles
//! overlapping). So the gradient is exactly that of what the forward
//! computed, which differs from a direct convolution only by rounding.
//!
//! The matrices come from Toom–Cook: the linear convolution of a 2-vector
//! and an r-vector evaluated at the points [`POINTS`] and at infinity,
//! interpolated back, and transposed into a correlation.
//!
//! The transforms work on [`LANES`] channels at a time, in copies compiled
//! for AVX-512 and for AVX2, one chosen at run time by the CPU's features.
//! They multiply, then add (never fused), so every copy gives the same
//! bits. The weights' transform is made with the weights (`weights.rs`),
//! once for all the micro-batches at the same parameters. The first
//! convolution, of one input channel, stays a gathered product: its
//! products would have one column.

use std::mem::MaybeUninit;

use super::gemm::{product_of, View};
use crate::workload::vector::by_features;

/// Outputs a tile gives along each side.
const OUT: usize = 4;

/// The largest kernel side computed this way: its tile of 8 uses the
/// points 0, ±1, ±2, ±1/2 and infinity; beyond, the transforms' entries grow and
/// `f32` loses digits.
pub(super) const MAX_KERNEL: usize = 5;

/// The finite interpolation points, the first `kernel + OUT - 2` of them
/// used.
const POINTS: [f64; MAX_KERNEL + OUT - 2] = [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5];

/// F(4 × 4, r × r)'s transforms for kernel side `r`.
#[derive(Debug, Clone)]
pub(super) struct Winograd {
    /// Kernel side.
    r: usize,
    /// Tile side, `r + 1`.
    n: usize,
    /// `Aᵀ`, `[2, n]`.
    at: Vec<f32>,
    /// `G`, `[n, r]`, and its transpose.
    g: Vec<f32>,
    gt: Vec<f32>,
    /// `Bᵀ`, `[n, n]`.
    bt: Vec<f32>,
    /// `A` and `B`, the transposes (the backward pass's transforms).
    a: Vec<f32>,
    b: Vec<f32>,
}

/// Channels a transform handles at once: one AVX-512 register of `f32`.
const LANES: usize = 16;

/// One value of [`LANES`] channels.
type Lanes = [f32; LANES];

/// The largest tile side.
const MAX_TILE: usize = MAX_KERNEL + OUT - 1;

/// A tile of channel lanes, `[MAX_TILE²]`, row-major with the tile's side.
type Tile = [Lanes; MAX_TILE * MAX_TILE];

/// `lanes` = `from` (at most [`LANES`] values), zeros after it: a full
/// chunk as one fixed-size copy (a copy of a length known only at run time
/// is a call to `memmove`, most of a transform's time).
#[inline(always)]
fn load(lanes: &mut Lanes, from: &[f32]) {
    match <&Lanes>::try_from(from) {
        Ok(full) => *lanes = *full,
        Err(_) => {
            *lanes = [0.0; LANES];
            for (l, &v) in lanes.iter_mut().zip(from) {
                *l = v;
            }
        }
    }
}

/// `to` = the first `to.len()` (at most [`LANES`]) values of `lanes`.
#[inline(always)]
fn store(to: &mut [f32], lanes: &Lanes) {
    match <&mut Lanes>::try_from(&mut *to) {
        Ok(full) => *full = *lanes,
        Err(_) => {
            for (t, &v) in to.iter_mut().zip(lanes) {
                *t = v;
            }
        }
    }
}

/// Runs `$body` for every chunk of [`LANES`] of `$width` channels (`$k0`
/// its first, `$w` how many) of every tile (`$ti`, `$tj`) of every image,
/// `$row` the tile's row in `V` and `M`: the loops of every transform. (A
/// macro, not a function taking a closure: a closure's body was compiled
/// apart, without the caller's target features.)
macro_rules! each_chunk_of_each_tile {
    (($side:expr, $batch:expr, $width:expr), |$row:ident, $ti:ident, $tj:ident, $image:ident, $k0:ident, $w:ident| $body:block) => {{
        let tiles = Winograd::tiles($side);
        for $ti in 0..tiles {
            for $tj in 0..tiles {
                for $image in 0..$batch {
                    let $row = ($ti * tiles + $tj) * $batch + $image;
                    for $k0 in (0..$width).step_by(LANES) {
                        let $w = LANES.min($width - $k0);
                        $body
                    }
                }
            }
        }
    }};
}

/// `d[ξ]` = the `w` values at `at` of matrix ξ of `matrices`, for each ξ.
#[inline(always)]
fn load_each(d: &mut Tile, matrices: &[Vec<f32>], at: usize, w: usize) {
    for (lanes, m) in d.iter_mut().zip(matrices) {
        load(lanes, &m[at..][..w]);
    }
}

/// The first `w` values of each `out[ξ]` to `to` at `at + ξ · stride`.
/// `to` is a fresh vector's spare capacity: the transforms write every
/// value of their outputs once, so these are not zeroed first (zeroing the
/// megabytes of `V` and `dM` cost about 3 % of a gradient call).
#[inline(always)]
fn store_each(to: &mut [MaybeUninit<f32>], out: &[Lanes], (at, stride): (usize, usize), w: usize) {
    for (xi, lanes) in out.iter().enumerate() {
        let to = &mut to[at + xi * stride..][..w];
        match <&mut [MaybeUninit<f32>; LANES]>::try_from(&mut *to) {
            Ok(full) => *full = lanes.map(MaybeUninit::new),
            Err(_) => {
                for (t, &v) in to.iter_mut().zip(lanes) {
                    t.write(v);
                }
            }
        }
    }
}

/// `m t mᵀ` of each of the `cf` columns of `from` (`[cols², cf]`, each
/// column a `cols × cols` tile `t`), `[rows², cf]`: the weights' transform
/// and its gradient, [`LANES`] columns at a time.
#[inline(always)]
fn each_column(m: &[f32], (rows, cols): (usize, usize), from: &[f32], cf: usize) -> Vec<f32> {
    let len = rows * rows * cf;
    let mut to = Vec::with_capacity(len);
    let spare = &mut to.spare_capacity_mut()[..len];
    let [mut d, mut half, mut out] = [[[0.0f32; LANES]; MAX_TILE * MAX_TILE]; 3];
    for k0 in (0..cf).step_by(LANES) {
        let w = LANES.min(cf - k0);
        for (k, lanes) in d.iter_mut().enumerate().take(cols * cols) {
            load(lanes, &from[k * cf + k0..][..w]);
        }
        two_sided(m, (rows, cols), &d, &mut half, &mut out);
        store_each(spare, &out[..rows * rows], (k0, cf), w);
    }
    // SAFETY: the chunks `k0..k0 + w` cover `0..cf`, and each wrote its
    // values of all `rows²` matrices: every value below `len`.
    unsafe { to.set_len(len) };
    to
}

/// `out = m d mᵀ` of one tile, each entry a value of [`LANES`] channels:
/// `m` is `[rows, cols]`, `d` `[cols, cols]`, `out` `[rows, rows]` (all
/// row-major). Each sum runs in index order, multiply then add, so any
/// vector width gives the same bits. (Compiled for each shape with its
/// sizes known, unrolled, it ran slower.)
#[inline(always)]
fn two_sided(m: &[f32], (rows, cols): (usize, usize), d: &Tile, half: &mut Tile, out: &mut Tile) {
    let row = |i: usize| &m[i * cols..][..cols];
    for i in 0..rows {
        for b in 0..cols {
            half[i * cols + b] = weighted(row(i), d, (b, cols));
        }
    }
    for i in 0..rows {
        for j in 0..rows {
            out[i * rows + j] = weighted(row(j), half, (i * cols, 1));
        }
    }
}

/// `Σ_k s[k] · x[at + k · stride]`, in index order.
#[inline(always)]
fn weighted(s: &[f32], x: &Tile, (at, stride): (usize, usize)) -> Lanes {
    let mut acc = [0.0f32; LANES];
    for (k, &s) in s.iter().enumerate() {
        for (acc, &x) in acc.iter_mut().zip(&x[at + k * stride]) {
            *acc += s * x;
        }
    }
    acc
}

/// The inverse of the `n × n` matrix `m` (row-major), by Gauss–Jordan with
/// partial pivoting; `m` must be invertible.
fn inverse(mut m: Vec<f64>, n: usize) -> Vec<f64> {
    let mut inv: Vec<f64> = (0..n * n)
        .map(|k| if k / n == k % n { 1.0 } else { 0.0 })
        .collect();
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&a, &b| m[a * n + col].abs().total_cmp(&m[b * n + col].abs()))
            .unwrap_or(col);
        for k in 0..n {
            m.swap(col * n + k, pivot * n + k);
            inv.swap(col * n + k, pivot * n + k);
        }
        let p = m[col * n + col];
        for k in 0..n {
            m[col * n + k] /= p;
            inv[col * n + k] /= p;
        }
        for row in (0..n).filter(|&row| row != col) {
            let f = m[row * n + col];
            for k in 0..n {
                m[row * n + k] -= f * m[col * n + k];
                inv[row * n + k] -= f * inv[col * n + k];
            }
        }
    }
    inv
}

/// The transpose of `m`, `[rows, cols]`.
fn transposed(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|k| m[(k % rows) * cols + k / rows])
        .collect()
}

/// A convolution's sizes: input side, images, input channels, filters.
pub(super) type Sizes = (usize, usize, usize, usize);

impl Winograd {
    /// The transforms for kernel side `r`, if this way computes it (2 ≤ r ≤
    /// [`MAX_KERNEL`]).
    pub(super) fn for_kernel(r: usize) -> Option<Self> {
        (2..=MAX_KERNEL).contains(&r).then(|| Self::new(r))
    }

    fn new(r: usize) -> Self {
        let n = OUT + r - 1;
        let points = &POINTS[..n - 1];
        // Rows of the evaluations at each point, the last at infinity (the
        // leading coefficient).
        let evaluate = |len: usize| -> Vec<f64> {
            let mut e = vec![0.0; n * len];
            for (j, &p) in points.iter().enumerate() {
                for k in 0..len {
                    e[j * len + k] = p.powi(k as i32);
                }
            }
            e[(n - 1) * len + len - 1] = 1.0;
            e
        };
        let narrow = |m: Vec<f64>| -> Vec<f32> { m.into_iter().map(|v| v as f32).collect() };
        // Aᵀ = E_aᵀ, G = E_b, Bᵀ = (V⁻¹)ᵀ
        let e_a = narrow(evaluate(OUT));
        let c = narrow(inverse(evaluate(n), n));
        Self {
            r,
            n,
            at: transposed(&e_a, n, OUT),
            a: e_a,
            g: narrow(evaluate(r)),
            gt: transposed(&narrow(evaluate(r)), n, r),
            bt: transposed(&c, n, n),
            b: c,
        }
    }

    /// Tiles along each side of a `side × side` map.
    fn tiles(side: usize) -> usize {
        side.div_ceil(OUT)
    }

    /// The weights' transform `U`, `[n², channels, filters]`, of `w`,
    /// `[r² · channels, filters]` (row `tap · channels + c`): `G g Gᵀ` of
    /// each input channel and filter.
    pub(super) fn weights(&self, w: &[f32], channels: usize, filters: usize) -> Vec<f32> {
        self.weights_of(w, channels * filters)
    }

    by_features! {
        /// [`Winograd::weights`] of `cf` channels × filters.
        fn weights_of(self: &Winograd, w: &[f32], cf: usize) -> Vec<f32> => weights_in;
    }

    /// [`Winograd::weights`], inlined into each feature's copy.
    #[inline(always)]
    fn weights_in(&self, w: &[f32], cf: usize) -> Vec<f32> {
        debug_assert_eq!(w.len(), self.r * self.r * cf);
        each_column(&self.g, (self.n, self.r), w, cf)
    }

    /// The weights' gradient `[r² · channels, filters]` from `d_u`, that of
    /// their transform (`[n², channels · filters]`): `Gᵀ dU G`.
    #[inline(always)]
    fn weights_backward(&self, d_u: &[f32], cf: usize) -> Vec<f32> {
        each_column(&self.gt, (self.r, self.n), d_u, cf)
    }

    /// The input coordinate of a tile's `a`-th row (or column) for tile
    /// index `t`, if inside the map (the "same" padding puts `(r − 1) / 2`
    /// before).
    #[inline(always)]
    fn input_at(&self, t: usize, a: usize, side: usize) -> Option<usize> {
        (OUT * t + a)
            .checked_sub((self.r - 1) / 2)
            .filter(|&i| i < side)
    }

    /// The output position `(i, j)`'s row among a tile's outputs `(y1,
    /// y2)`, by `row_of`, if it is kept.
    #[inline(always)]
    fn output_row(
        row_of: &[usize],
        side: usize,
        (ti, tj): (usize, usize),
        (y1, y2): (usize, usize),
    ) -> Option<usize> {
        let (i, j) = (OUT * ti + y1, OUT * tj + y2);
        (i < side && j < side)
            .then(|| row_of[i * side + j])
            .filter(|&r| r != usize::MAX)
    }

    /// The input's transform `V`, `[n², tiles · batch, channels]` (one
    /// matrix per ξ, row `(tile, image)`: each product reads its operand
    /// whole; interleaved by row, the products ran slower), of `x`, rows
    /// `[side² · batch, channels]` (position after position, images
    /// inside): `Bᵀ d B` of each tile.
    #[inline(always)]
    fn input(&self, x: &[f32], (side, batch, c, _): Sizes) -> Vec<f32> {
        let (n, nn) = (self.n, self.n * self.n);
        let rows = Self::tiles(side).pow(2) * batch;
        let len = nn * rows * c;
        let mut v = Vec::with_capacity(len);
        let spare = &mut v.spare_capacity_mut()[..len];
        let [mut d, mut half, mut out] = [[[0.0f32; LANES]; MAX_TILE * MAX_TILE]; 3];
        each_chunk_of_each_tile!((side, batch, c), |row, ti, tj, image, k0, w| {
            for a in 0..n {
                let i = self.input_at(ti, a, side);
                for b in 0..n {
                    let lanes = &mut d[a * n + b];
                    match (i, self.input_at(tj, b, side)) {
                        (Some(i), Some(j)) => {
                            load(lanes, &x[((i * side + j) * batch + image) * c + k0..][..w]);
                        }
                        _ => *lanes = [0.0; LANES],
                    }
                }
            }
            two_sided(&self.bt, (n, n), &d, &mut half, &mut out);
            store_each(spare, &out[..nn], (row * c + k0, rows * c), w);
        });
        // SAFETY: every row of every matrix ξ < n², every chunk of its `c`
        // values, was written: every value below `len`.
        unsafe { v.set_len(len) };
        v
    }

    /// Adds the input's gradient from `d_v` (that of its transform, one
    /// `[rows, channels]` matrix per ξ) to `d_x` (rows as
    /// [`Winograd::input`]'s `x`): `B dV Bᵀ` of each tile, the parts inside
    /// the map.
    #[inline(always)]
    fn input_backward(&self, d_v: &[Vec<f32>], (side, batch, c, _): Sizes, d_x: &mut [f32]) {
        let n = self.n;
        let [mut d, mut half, mut out] = [[[0.0f32; LANES]; MAX_TILE * MAX_TILE]; 3];
        each_chunk_of_each_tile!((side, batch, c), |row, ti, tj, image, k0, w| {
            load_each(&mut d, d_v, row * c + k0, w);
            two_sided(&self.b, (n, n), &d, &mut half, &mut out);
            for a in 0..n {
                let Some(i) = self.input_at(ti, a, side) else {
                    continue;
                };
                for b in 0..n {
                    if let Some(j) = self.input_at(tj, b, side) {
                        let to = &mut d_x[((i * side + j) * batch + image) * c + k0..][..w];
                        for (to, &g) in to.iter_mut().zip(&out[a * n + b]) {
                            *to += g;
                        }
                    }
                }
            }
        });
    }

    /// The output `[rows, filters]`, output position `(i, j)` of image
    /// `image` at row `row_of[i · side + j] · batch + image` (not kept where
    /// `row_of` is `usize::MAX`), from `m`, one `[tiles · batch, filters]`
    /// matrix per ξ: `Aᵀ M A` of each tile.
    #[inline(always)]
    fn output(&self, m: &[Vec<f32>], (side, batch, _, f): Sizes, row_of: &[usize]) -> Vec<f32> {
        let n = self.n;
        let kept = row_of.iter().filter(|&&r| r != usize::MAX).count();
        let mut y = vec![0.0f32; kept * batch * f];
        let [mut d, mut half, mut out] = [[[0.0f32; LANES]; MAX_TILE * MAX_TILE]; 3];
        each_chunk_of_each_tile!((side, batch, f), |row, ti, tj, image, k0, w| {
            load_each(&mut d, m, row * f + k0, w);
            two_sided(&self.at, (OUT, n), &d, &mut half, &mut out);
            for y1 in 0..OUT {
                for y2 in 0..OUT {
                    if let Some(p) = Self::output_row(row_of, side, (ti, tj), (y1, y2)) {
                        store(
                            &mut y[(p * batch + image) * f + k0..][..w],
                            &out[y1 * OUT + y2],
                        );
                    }
                }
            }
        });
        y
    }

    /// The gradient of `M`, `[n², tiles · batch, filters]` (as `V`), from
    /// `d_y`, the output's (laid out as [`Winograd::output`]'s): `A dY Aᵀ`
    /// of each tile.
    #[inline(always)]
    fn output_backward(
        &self,
        d_y: &[f32],
        (side, batch, _, f): Sizes,
        row_of: &[usize],
    ) -> Vec<f32> {
        let (n, nn) = (self.n, self.n * self.n);
        let rows = Self::tiles(side).pow(2) * batch;
        let len = nn * rows * f;
        let mut d_m = Vec::with_capacity(len);
        let spare = &mut d_m.spare_capacity_mut()[..len];
        let [mut d, mut half, mut out] = [[[0.0f32; LANES]; MAX_TILE * MAX_TILE]; 3];
        each_chunk_of_each_tile!((side, batch, f), |row, ti, tj, image, k0, w| {
            for y1 in 0..OUT {
                for y2 in 0..OUT {
                    let lanes = &mut d[y1 * OUT + y2];
                    match Self::output_row(row_of, side, (ti, tj), (y1, y2)) {
                        Some(p) => load(lanes, &d_y[(p * batch + image) * f + k0..][..w]),
                        None => *lanes = [0.0; LANES],
                    }
                }
            }
            two_sided(&self.a, (n, OUT), &d, &mut half, &mut out);
            store_each(spare, &out[..nn], (row * f + k0, rows * f), w);
        });
        // SAFETY: every row of every matrix ξ < n², every chunk of its `f`
        // values, was written: every value below `len`.
        unsafe { d_m.set_len(len) };
        d_m
    }

    by_features! {
        /// The convolution's output before its bias, `[rows, filters]` laid out
        /// by `row_of` (see [`Winograd::output`]), of `x` (rows `[side² · batch,
        /// c]`) with transformed weights `u` ([`Winograd::weights`]); and `V`,
        /// which the backward pass reads.
        pub(super) fn forward(
            self: &Winograd,
            x: &[f32],
            u: &[f32],
            sizes: Sizes,
            row_of: &[usize],
        ) -> (Vec<f32>, Vec<f32>) => forward_in;
    }

    /// [`Winograd::forward`], inlined into each feature's copy.
    #[inline(always)]
    fn forward_in(
        &self,
        x: &[f32],
        u: &[f32],
        sizes: Sizes,
        row_of: &[usize],
    ) -> (Vec<f32>, Vec<f32>) {
        let (side, batch, c, f) = sizes;
        let v = self.input(x, sizes);
        let rows = Self::tiles(side).pow(2) * batch;
        let nn = self.n * self.n;
        let m: Vec<Vec<f32>> = (0..nn)
            .map(|xi| {
                product_of(
                    View::rows(&v[xi * rows * c..][..rows * c], rows, c),
                    View::rows(&u[xi * c * f..][..c * f], c, f),
                )
            })
            .collect();
        (self.output(&m, sizes, row_of), v)
    }

    by_features! {
        /// The gradients of the weights (`[r² · c, f]`) and, with `input`, of
        /// `x` from `d_y`, the gradient of [`Winograd::forward`]'s output, with
        /// the `v` it kept.
        pub(super) fn backward(
            self: &Winograd,
            d_y: &[f32],
            kept: (&[f32], &[f32]),
            sizes: Sizes,
            row_of: &[usize],
            input: bool,
        ) -> (Vec<f32>, Option<Vec<f32>>) => backward_in;
    }

    /// [`Winograd::backward`], inlined into each feature's copy.
    #[inline(always)]
    fn backward_in(
        &self,
        d_y: &[f32],
        (v, u): (&[f32], &[f32]),
        sizes: Sizes,
        row_of: &[usize],
        input: bool,
    ) -> (Vec<f32>, Option<Vec<f32>>) {
        let (side, batch, c, f) = sizes;
        let d_m = self.output_backward(d_y, sizes, row_of);
        let rows = Self::tiles(side).pow(2) * batch;
        let nn = self.n * self.n;
        let d_m_at = |xi: usize| View::rows(&d_m[xi * rows * f..][..rows * f], rows, f);
        let mut d_u = Vec::with_capacity(nn * c * f);
        for xi in 0..nn {
            let v_xi = View::rows(&v[xi * rows * c..][..rows * c], rows, c);
            d_u.extend(product_of(v_xi.t(), d_m_at(xi)));
        }
        let d_w = self.weights_backward(&d_u, c * f);
        let d_x = if input {
            let d_v: Vec<Vec<f32>> = (0..nn)
                .map(|xi| product_of(d_m_at(xi), View::rows(&u[xi * c * f..][..c * f], c, f).t()))
                .collect();
            let mut d_x = vec![0.0f32; side * side * batch * c];
            self.input_backward(&d_v, sizes, &mut d_x);
            Some(d_x)
        } else {
            None
        };
        (d_w, d_x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pseudo-random value in [−1, 1) from `k`.
    fn value(k: usize) -> f32 {
        let h = (k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// The direct "same" correlation in f64: `[side² · batch, f]`, positions
    /// in row order.
    fn direct(
        x: &[f32],
        w: &[f32],
        (side, batch, c, f, r): (usize, usize, usize, usize, usize),
    ) -> Vec<f64> {
        let pad = (r - 1) / 2;
        let mut y = vec![0.0f64; side * side * batch * f];
        for i in 0..side {
            for j in 0..side {
                for image in 0..batch {
                    for u in 0..r {
                        for v in 0..r {
                            let (Some(a), Some(b)) =
                                ((i + u).checked_sub(pad), (j + v).checked_sub(pad))
                            else {
                                continue;
                            };
                            if a >= side || b >= side {
                                continue;
                            }
                            for ci in 0..c {
                                let xv = f64::from(x[((a * side + b) * batch + image) * c + ci]);
                                for o in 0..f {
                                    y[((i * side + j) * batch + image) * f + o] +=
                                        xv * f64::from(w[((u * r + v) * c + ci) * f + o]);
                                }
                            }
                        }
                    }
                }
            }
        }
        y
    }

    /// Input and weights of a convolution of `(side, batch, c, f, r)`, its
    /// transforms and the weights' transform.
    fn prepared(
        (side, batch, c, f, r): (usize, usize, usize, usize, usize),
    ) -> (Vec<f32>, Vec<f32>, Winograd, Vec<f32>) {
        let x: Vec<f32> = (0..side * side * batch * c).map(value).collect();
        let w: Vec<f32> = (0..r * r * c * f).map(|k| value(k + 1_000_003)).collect();
        let t = Winograd::for_kernel(r).expect("a kernel of 2 to 5");
        let u = t.weights(&w, c, f);
        (x, w, t, u)
    }

    /// The largest difference from `want` over its largest magnitude.
    fn relative(got: &[f32], want: &[f64]) -> f64 {
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0.0f64, |m, (&g, &w)| m.max((f64::from(g) - w).abs()));
        worst / scale
    }

    #[test]
    fn the_transforms_compute_the_correlation() {
        // odd and even sides, odd and even kernels, the pneumonia net's layers
        for (side, batch, c, f, r) in [
            (7, 3, 4, 5, 5),
            (14, 2, 32, 64, 5),
            (7, 2, 64, 128, 5),
            (6, 2, 3, 2, 3),
            (5, 1, 2, 3, 4),
            (9, 2, 3, 4, 2),
        ] {
            let (x, w, t, u) = prepared((side, batch, c, f, r));
            let row_of: Vec<usize> = (0..side * side).collect();
            let (y, _) = t.forward(&x, &u, (side, batch, c, f), &row_of);
            let want = direct(&x, &w, (side, batch, c, f, r));
            let err = relative(&y, &want);
            // F(4 × 4, 5 × 5) on conv3's shape: 1.1e-5 (F(2 × 2, 5 × 5):
            // 5.4e-6)
            assert!(
                err < 2e-5,
                "{side}² × {c} → {f}, kernel {r}: relative error {err}"
            );
        }
    }

    #[test]
    fn larger_kernels_are_left_to_the_gathered_product() {
        assert!(Winograd::for_kernel(6).is_none());
        assert!(Winograd::for_kernel(1).is_none());
    }

    /// The backward pass is the adjoint of the forward: for any `d_y`,
    /// ⟨d_y, conv(x, w)⟩ = ⟨d_w, w⟩ = ⟨d_x, x⟩ (the convolution is linear in
    /// each), in f64 up to f32 rounding.
    #[test]
    fn the_backward_pass_is_the_forwards_adjoint() {
        for (side, batch, c, f, r) in [
            (7, 3, 4, 5, 5),
            (14, 2, 8, 6, 5),
            (5, 2, 2, 3, 4),
            (6, 1, 3, 2, 3),
        ] {
            let (x, w, t, u) = prepared((side, batch, c, f, r));
            // keep every other position, in reverse order, as a pool's
            // quarters reorder them
            let mut row_of = vec![usize::MAX; side * side];
            for (kept, p) in (0..side * side).rev().filter(|p| p % 3 != 1).enumerate() {
                row_of[p] = kept;
            }
            let (y, v) = t.forward(&x, &u, (side, batch, c, f), &row_of);
            let d_y: Vec<f32> = (0..y.len()).map(|k| value(k + 77)).collect();
            let (d_w, d_x) = t.backward(&d_y, (&v, &u), (side, batch, c, f), &row_of, true);
            let d_x = d_x.expect("asked for");
            let dot = |a: &[f32], b: &[f32]| -> f64 {
                a.iter()
                    .zip(b)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum()
            };
            let out = dot(&d_y, &y);
            let scale = d_y
                .iter()
                .zip(&y)
                .map(|(&a, &b)| f64::from((a * b).abs()))
                .sum::<f64>();
            for (name, got) in [("weights", dot(&d_w, &w)), ("input", dot(&d_x, &x))] {
                assert!(
                    (got - out).abs() <= 1e-5 * scale,
                    "{name}: {got} against {out} ({side}², kernel {r})"
                );
            }
            assert_eq!(d_w.len(), w.len());
            assert_eq!(d_x.len(), x.len());
        }
    }

    /// The copies compiled for the CPU's features give the baseline copy's
    /// bits, forward and backward (on a machine with AVX-512 or AVX2 this
    /// compares two compilations of the same loops).
    #[test]
    fn every_compiled_copy_gives_the_same_bits() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (side, batch, c, f, r) in [(14, 2, 32, 20, 5), (7, 3, 17, 5, 3)] {
            let sizes = (side, batch, c, f);
            let (x, w, t, u) = prepared((side, batch, c, f, r));
            let row_of: Vec<usize> = (0..side * side).collect();
            assert_eq!(bits(&u), bits(&t.weights_in(&w, c * f)));
            let (y, v) = t.forward(&x, &u, sizes, &row_of);
            let (y_plain, v_plain) = t.forward_in(&x, &u, sizes, &row_of);
            assert_eq!((bits(&y), bits(&v)), (bits(&y_plain), bits(&v_plain)));
            let d_y: Vec<f32> = (0..y.len()).map(|k| value(k + 5)).collect();
            let (d_w, d_x) = t.backward(&d_y, (&v, &u), sizes, &row_of, true);
            let (d_w_plain, d_x_plain) = t.backward_in(&d_y, (&v, &u), sizes, &row_of, true);
            assert_eq!(bits(&d_w), bits(&d_w_plain));
            assert_eq!(d_x.map(|d| bits(&d)), d_x_plain.map(|d| bits(&d)));
        }
    }
}
