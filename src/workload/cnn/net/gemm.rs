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
        kernel(out.as_mut_ptr(), a, b);
        out.set_len(len);
    }
    out
}

/// The `gemm` call behind [`product_of`]: `out = a · b`, written without
/// being read.
///
/// # Safety
/// `out` must be valid for writes of `a.rows × b.cols` values, row-major,
/// and alias neither operand; `a.cols == b.rows > 0`.
unsafe fn kernel(out: *mut f32, a: View<'_>, b: View<'_>) {
    if a.rows == 0 || b.cols == 0 {
        return;
    }
    // SAFETY: every view holds exactly rows · cols values (`View::rows`;
    // `t` swaps rows with columns and their strides together), so each
    // `(r, c)` the kernel reads lies inside its slice; the caller vouches
    // for `out`.
    unsafe {
        gemm::gemm(
            a.rows,
            b.cols,
            a.cols,
            out,
            1,
            b.cols as isize,
            false,
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
    use super::{product_of, View};

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
}
