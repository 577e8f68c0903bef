//! Matrix products on `f32` slices, through the `gemm` crate's kernels
//! (those burn-flex calls) on the calling thread. A transposed operand is a
//! view with its strides swapped, never a copy.

/// A matrix read in place: entry `(r, c)` is `data[r · row_stride + c ·
/// col_stride]`.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> View<'a> {
    /// `data` as `rows × cols`, row-major.
    ///
    /// # Panics
    /// If `data` does not hold exactly `rows · cols` values.
    pub(super) fn rows(data: &'a [f32], rows: usize, cols: usize) -> Self {
        assert_eq!(data.len(), rows * cols, "a {rows} × {cols} matrix");
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// `rows × cols` values of `data` read row-major with rows
    /// `row_stride` apart: a block of columns of a wider matrix, `data`
    /// starting at its first value.
    ///
    /// # Panics
    /// If the rows are wider than their stride or reach past `data`.
    pub(super) fn block(data: &'a [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        assert!(
            cols <= row_stride,
            "a block of {cols} columns in rows of {row_stride}"
        );
        assert!(
            rows == 0 || (rows - 1) * row_stride + cols <= data.len(),
            "a {rows} × {cols} block in {} values",
            data.len()
        );
        Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride: 1,
        }
    }

    /// The transpose, reading the same values.
    pub(super) fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }
}

/// `out = a · b`, or `out += a · b` with `accumulate`: `out` holds the
/// product's `a.rows × b.cols` values row-major with rows `out_stride`
/// apart (a block of columns of a wider matrix, `out` starting at its first
/// value).
///
/// # Panics
/// If the shapes do not fit.
pub(super) fn product_into(
    out: &mut [f32],
    out_stride: usize,
    (a, b): (View<'_>, View<'_>),
    accumulate: bool,
) {
    assert_eq!(a.cols, b.rows, "inner dimensions");
    assert!(b.cols <= out_stride, "the output's rows");
    assert!(
        a.rows == 0 || (a.rows - 1) * out_stride + b.cols <= out.len(),
        "the output's size"
    );
    if a.rows == 0 || b.cols == 0 {
        return;
    }
    if a.cols == 0 {
        if !accumulate {
            for row in out.chunks_mut(out_stride).take(a.rows) {
                row[..b.cols].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: the asserts keep every `(r, c)` of the output, at `r ·
    // out_stride + c`, inside `out`, which is borrowed mutably and so
    // aliases neither operand.
    unsafe { kernel(out.as_mut_ptr(), out_stride, (a, b), accumulate) }
}

/// `a · b` in a new row-major buffer, `a.rows × b.cols`. The same
/// operands give the same bits on any thread of one machine (no threads of
/// its own; the kernel is chosen by the CPU's features).
///
/// # Panics
/// If the shapes do not fit.
pub(super) fn product_of(a: View<'_>, b: View<'_>) -> Vec<f32> {
    assert_eq!(a.cols, b.rows, "inner dimensions");
    let len = a.rows * b.cols;
    if a.cols == 0 {
        return vec![0.0; len];
    }
    let mut out = Vec::<f32>::with_capacity(len);
    // SAFETY: `out` has room for `a.rows × b.cols` values, and the kernel
    // writes every one of them (it reads none), so all `len` are
    // initialised when the length is set.
    unsafe {
        kernel(out.as_mut_ptr(), b.cols, (a, b), false);
        out.set_len(len);
    }
    out
}

/// The `gemm` call behind [`product_into`] and [`product_of`]: `out = a ·
/// b` (written without being read), or `out += a · b` with `accumulate`.
///
/// # Safety
/// `out` must be valid for writes (and with `accumulate` reads) of `a.rows`
/// rows of `b.cols` values `out_stride` apart, and alias neither operand;
/// `a.cols == b.rows > 0`.
unsafe fn kernel(out: *mut f32, out_stride: usize, (a, b): (View<'_>, View<'_>), accumulate: bool) {
    if a.rows == 0 || b.cols == 0 {
        return;
    }
    // SAFETY: each `(r, c)` of a view lies inside its slice (`View::rows`
    // checks that it holds rows · cols values, `View::block` that its last
    // row ends inside it, and `t` swaps rows with columns and their
    // strides together); the caller vouches for `out`.
    unsafe {
        gemm::gemm(
            a.rows,
            b.cols,
            a.cols,
            out,
            1,
            out_stride as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{product_into, product_of, View};

    /// The products, with transposed views, are the schoolbook sums (small
    /// integers: exact in f32).
    #[test]
    fn products_of_views_are_the_sums() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 3) as f32).collect();
        let at = |r: usize, c: usize| a[r * k + c];
        let bt = |r: usize, c: usize| b[r * n + c];
        let expected: Vec<f32> = (0..m * n)
            .map(|i| (0..k).map(|j| at(i / n, j) * bt(j, i % n)).sum())
            .collect();
        assert_eq!(
            product_of(View::rows(&a, m, k), View::rows(&b, k, n)),
            expected
        );
        // (bᵀ aᵀ) = (a b)ᵀ, from the same slices read transposed
        let out_t = product_of(View::rows(&b, k, n).t(), View::rows(&a, m, k).t());
        for r in 0..m {
            for c in 0..n {
                assert_eq!(out_t[c * m + r], expected[r * n + c]);
            }
        }
        // an empty inner dimension is a zero product, an empty side none
        assert_eq!(
            product_of(View::rows(&[], 2, 0), View::rows(&[], 0, 2)),
            vec![0.0; 4]
        );
        assert!(product_of(View::rows(&[], 0, 3), View::rows(&b[..9], 3, 3)).is_empty());
    }

    /// Blocks of columns, read and written in place, and accumulation.
    #[test]
    fn products_of_blocks_are_the_blocks_products() {
        // a: 3 × 6, its columns 2..5 as a 3 × 3 block
        let a: Vec<f32> = (0..18).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..9).map(|i| (i % 4) as f32).collect();
        let dense: Vec<f32> = (0..3)
            .flat_map(|r| a[r * 6 + 2..r * 6 + 5].to_vec())
            .collect();
        let expected = product_of(View::rows(&dense, 3, 3), View::rows(&b, 3, 3));
        let block = View::block(&a[2..], 3, 3, 6);
        assert_eq!(product_of(block, View::rows(&b, 3, 3)), expected);
        // into columns 1..4 of rows of 5, twice with accumulation
        let mut out = [-1.0f32; 15];
        product_into(&mut out[1..], 5, (block, View::rows(&b, 3, 3)), false);
        product_into(&mut out[1..], 5, (block, View::rows(&b, 3, 3)), true);
        for r in 0..3 {
            assert_eq!(out[r * 5], -1.0);
            assert_eq!(out[r * 5 + 4], -1.0);
            for c in 0..3 {
                assert_eq!(out[r * 5 + 1 + c], 2.0 * expected[r * 3 + c]);
            }
        }
    }
}
