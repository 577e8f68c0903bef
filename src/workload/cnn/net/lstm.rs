//! The LSTM's recurrence and its backward pass (backpropagation through
//! time) on `f32` buffers, for the net's written-out passes.
//!
//! The forward pass keeps each step's activations, the backward pass walks
//! the steps back once, and the gradient of `U` is one product over all
//! steps. Same gates and layout as `Net::lstm_last_hidden` (burn's `Lstm`):
//! `z_t = z_x[t] + h_{t−1} · U` with the gates `[i, f, o, g]`, `c_t = f ⊙
//! c_{t−1} + i ⊙ g`, `h_t = o ⊙ tanh(c_t)`, starting from zero.

use super::activation::{sigmoid, tanh};
use super::gemm::{product_of, View};
use crate::workload::vector::by_features;

/// One forward pass of the LSTM and what its backward pass reads. Each
/// field holds the steps one after the other, `batch` rows a step.
pub(super) struct LstmTape {
    hidden: usize,
    batch: usize,
    steps: usize,
    /// `U`: `[hidden, 4 · hidden]`.
    w_h: Vec<f32>,
    /// The sigmoid of the input, forget and output gates: rows of `3 ·
    /// hidden`.
    ifo: Vec<f32>,
    /// The tanh of the candidate: rows of `hidden`.
    g: Vec<f32>,
    /// The cell state `c_t`.
    c: Vec<f32>,
    /// `tanh(c_t)`.
    k: Vec<f32>,
    /// The hidden state `h_t`.
    h: Vec<f32>,
}

impl LstmTape {
    /// Runs the LSTM over `steps` steps of `batch` rows each.
    ///
    /// # Shapes
    /// - `z_x`: `[steps · batch, 4 · hidden]`, the input's share of the
    ///   gates with their biases, step after step
    /// - `w_h`: `[hidden, 4 · hidden]`
    pub(super) fn forward(
        z_x: &[f32],
        w_h: &[f32],
        (hidden, steps, batch): (usize, usize, usize),
    ) -> Self {
        let gates = 4 * hidden;
        debug_assert_eq!(z_x.len(), steps * batch * gates);
        debug_assert_eq!(w_h.len(), hidden * gates);
        let rows = steps * batch;
        let mut tape = Self {
            hidden,
            batch,
            steps,
            w_h: w_h.to_vec(),
            ifo: vec![0.0; rows * 3 * hidden],
            g: vec![0.0; rows * hidden],
            c: vec![0.0; rows * hidden],
            k: vec![0.0; rows * hidden],
            h: vec![0.0; rows * hidden],
        };
        let block = batch * hidden;
        let mut z = vec![0.0f32; batch * gates];
        for t in 0..steps {
            let z_t = &z_x[t * batch * gates..(t + 1) * batch * gates];
            if t == 0 {
                z.copy_from_slice(z_t);
            } else {
                let h_prev = &tape.h[(t - 1) * block..t * block];
                let r = product_of(
                    View::rows(h_prev, batch, hidden),
                    View::rows(&tape.w_h, hidden, gates),
                );
                for ((z, &a), &b) in z.iter_mut().zip(z_t).zip(&r) {
                    *z = a + b;
                }
            }
            let (c_before, c_now) = tape.c.split_at_mut(t * block);
            let c_prev = (t > 0).then(|| &c_before[(t - 1) * block..]);
            cells(
                hidden,
                &z,
                c_prev,
                Step {
                    ifo: &mut tape.ifo[t * batch * 3 * hidden..][..batch * 3 * hidden],
                    g: &mut tape.g[t * block..][..block],
                    c: &mut c_now[..block],
                    k: &mut tape.k[t * block..][..block],
                    h: &mut tape.h[t * block..][..block],
                },
            );
        }
        tape
    }

    /// The hidden state after the last step (zero without steps):
    /// `[batch, hidden]`.
    pub(super) fn last_hidden(&self) -> Vec<f32> {
        let block = self.batch * self.hidden;
        match self.steps {
            0 => vec![0.0; block],
            s => self.h[(s - 1) * block..s * block].to_vec(),
        }
    }

    /// The gradients of the input's share of the gates (`[steps · batch, 4 ·
    /// hidden]`) and of `U` (`[hidden, 4 · hidden]`), from that of the last
    /// hidden state (`[batch, hidden]`).
    pub(super) fn backward(&self, d_last: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let (hidden, batch, steps) = (self.hidden, self.batch, self.steps);
        let gates = 4 * hidden;
        let block = batch * hidden;
        if steps == 0 {
            return (Vec::new(), vec![0.0; hidden * gates]);
        }
        let mut d_z = vec![0.0f32; steps * batch * gates];
        let mut d_h = d_last.to_vec();
        let mut d_c = vec![0.0f32; block];
        for t in (0..steps).rev() {
            let d_zt = &mut d_z[t * batch * gates..(t + 1) * batch * gates];
            for row in 0..batch {
                let at = t * block + row * hidden;
                let ifo = &self.ifo[(t * batch + row) * 3 * hidden..][..3 * hidden];
                let d_row = &mut d_zt[row * gates..(row + 1) * gates];
                for j in 0..hidden {
                    let (i, f, o) = (ifo[j], ifo[hidden + j], ifo[2 * hidden + j]);
                    let (g, k) = (self.g[at + j], self.k[at + j]);
                    let dh = d_h[row * hidden + j];
                    let d_o = dh * k;
                    // through tanh(c_t): (1 − k²), plus what c_{t+1} sent
                    let d_k = dh * o;
                    let d_ct = d_k - d_k * (k * k) + d_c[row * hidden + j];
                    let d_i = d_ct * g;
                    let d_g = d_ct * i;
                    let d_f = match t {
                        0 => 0.0,
                        _ => d_ct * self.c[at - block + j],
                    };
                    d_c[row * hidden + j] = d_ct * f;
                    // through the sigmoids: a (1 − a); the candidate's tanh: 1 − g²
                    d_row[j] = d_i * i - d_i * (i * i);
                    d_row[hidden + j] = d_f * f - d_f * (f * f);
                    d_row[2 * hidden + j] = d_o * o - d_o * (o * o);
                    d_row[3 * hidden + j] = d_g - d_g * (g * g);
                }
            }
            if t > 0 {
                d_h = product_of(
                    View::rows(d_zt, batch, gates),
                    View::rows(&self.w_h, hidden, gates).t(),
                );
            }
        }
        // U's gradient: Σ_{t ≥ 1} h_{t−1}ᵀ · dz_t, one product
        let d_w_h = match steps {
            1 => vec![0.0; hidden * gates],
            _ => product_of(
                View::rows(&self.h[..(steps - 1) * block], (steps - 1) * batch, hidden).t(),
                View::rows(&d_z[batch * gates..], (steps - 1) * batch, gates),
            ),
        };
        (d_z, d_w_h)
    }
}

/// One step's activations, `batch` rows each: the fields of [`LstmTape`]
/// at that step.
struct Step<'a> {
    ifo: &'a mut [f32],
    g: &'a mut [f32],
    c: &'a mut [f32],
    k: &'a mut [f32],
    h: &'a mut [f32],
}

by_features! {
    /// One step of the cells for each row: the gates from their
    /// pre-activations `z` (`[batch, 4 · hidden]`), the cell state from the
    /// previous one (none at the first step) and the hidden state.
    fn cells(hidden: usize, z: &[f32], c_prev: Option<&[f32]>, step: Step<'_>) => cells_in;
}

/// [`cells`], inlined into each feature's copy.
#[inline(always)]
fn cells_in(hidden: usize, z: &[f32], c_prev: Option<&[f32]>, step: Step<'_>) {
    let gates = 4 * hidden;
    for (row, z_row) in z.chunks_exact(gates).enumerate() {
        let ifo = &mut step.ifo[row * 3 * hidden..][..3 * hidden];
        for (a, &z) in ifo.iter_mut().zip(&z_row[..3 * hidden]) {
            *a = sigmoid(z);
        }
        let at = row * hidden;
        let (i, rest) = ifo.split_at(hidden);
        let (f, o) = rest.split_at(hidden);
        let g = &mut step.g[at..][..hidden];
        for (g, &z) in g.iter_mut().zip(&z_row[3 * hidden..]) {
            *g = tanh(z);
        }
        let c = &mut step.c[at..][..hidden];
        match c_prev {
            None => {
                for ((c, &i), &g) in c.iter_mut().zip(i).zip(&*g) {
                    *c = i * g;
                }
            }
            Some(c_prev) => {
                let c_prev = &c_prev[at..][..hidden];
                for ((((c, &i), &g), &f), &p) in c.iter_mut().zip(i).zip(&*g).zip(f).zip(c_prev) {
                    *c = f * p + i * g;
                }
            }
        }
        let k = &mut step.k[at..][..hidden];
        let h = &mut step.h[at..][..hidden];
        for (((k, h), &c), &o) in k.iter_mut().zip(h.iter_mut()).zip(&*c).zip(o) {
            *k = tanh(c);
            *h = o * *k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy the CPU's features pick gives the bits of the baseline copy
    /// (on a machine with AVX-512 or AVX2 this compares two compilations).
    #[test]
    fn every_compiled_copy_of_the_cells_gives_the_same_bits() {
        let (hidden, batch) = (20, 3);
        let z: Vec<f32> = (0..batch * 4 * hidden)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173)
            .collect();
        let c_prev: Vec<f32> = (0..batch * hidden)
            .map(|i| (i as f32 - 30.0) * 0.05)
            .collect();
        let run = |dispatched: bool| {
            let mut out = [
                vec![0.0f32; batch * 3 * hidden],
                vec![0.0; batch * hidden],
                vec![0.0; batch * hidden],
                vec![0.0; batch * hidden],
                vec![0.0; batch * hidden],
            ];
            let [ifo, g, c, k, h] = &mut out;
            let step = Step { ifo, g, c, k, h };
            match dispatched {
                true => cells(hidden, &z, Some(&c_prev), step),
                false => cells_in(hidden, &z, Some(&c_prev), step),
            }
            out.map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
        };
        assert_eq!(run(true), run(false));
    }
}
