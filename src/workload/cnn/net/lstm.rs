//! The LSTM's recurrence and its backward pass (backpropagation through
//! time) on `f32` buffers, for the net's written-out passes.
//!
//! The forward pass keeps each step's activations, the backward pass walks
//! the steps back once, and the gradient of `U` is one product over all
//! steps. Same gates and layout as `Net::lstm_last_hidden` (burn's `Lstm`):
//! `z_t = z_x[t] + h_{t−1} · U` with the gates `[i, f, o, g]`, `c_t = f ⊙
//! c_{t−1} + i ⊙ g`, `h_t = o ⊙ tanh(c_t)`, starting from zero.

use super::gemm::{product_of, View};
use super::layers::sigmoid;

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
            ifo: Vec::with_capacity(rows * 3 * hidden),
            g: Vec::with_capacity(rows * hidden),
            c: Vec::with_capacity(rows * hidden),
            k: Vec::with_capacity(rows * hidden),
            h: Vec::with_capacity(rows * hidden),
        };
        let block = batch * hidden;
        for t in 0..steps {
            let z_t = &z_x[t * batch * gates..(t + 1) * batch * gates];
            let recurrent = (t > 0).then(|| {
                let h_prev = &tape.h[(t - 1) * block..t * block];
                product_of(
                    View::rows(h_prev, batch, hidden),
                    View::rows(&tape.w_h, hidden, gates),
                )
            });
            for row in 0..batch {
                let z_row = &z_t[row * gates..(row + 1) * gates];
                let z = |j: usize| match &recurrent {
                    Some(r) => z_row[j] + r[row * gates + j],
                    None => z_row[j],
                };
                for j in 0..3 * hidden {
                    tape.ifo.push(sigmoid(z(j)));
                }
                let ifo = &tape.ifo[tape.ifo.len() - 3 * hidden..];
                for j in 0..hidden {
                    let g = z(3 * hidden + j).tanh();
                    let ig = ifo[j] * g;
                    let c = match t {
                        0 => ig,
                        _ => ifo[hidden + j] * tape.c[(t - 1) * block + row * hidden + j] + ig,
                    };
                    let k = c.tanh();
                    tape.g.push(g);
                    tape.c.push(c);
                    tape.k.push(k);
                    tape.h.push(ifo[2 * hidden + j] * k);
                }
            }
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
