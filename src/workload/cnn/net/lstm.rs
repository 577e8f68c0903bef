//! The LSTM's backward pass written out (backpropagation through time) on
//! plain burn tensors, for `CnnNet::gradient`.
//!
//! Through burn's autodiff the recurrence costs a graph node per operation
//! and step, and every step's rows cut from the input's share of the gates
//! send back a gradient as large as what they are cut from. Here the forward
//! pass keeps each step's activations, the backward pass walks the steps
//! back once, and the gradient of the input's share is one concatenation.
//! Same gates and layout as `Net::lstm_last_hidden`: `z_t =
//! z_x[t] + h_{t−1} · U` with the gates `[i, f, o, g]`, `c_t = f ⊙ c_{t−1} + i
//! ⊙ g`, `h_t = o ⊙ tanh(c_t)`, starting from zero.

use burn::tensor::activation::sigmoid;
use burn::tensor::{s, Tensor};

/// One forward pass of the LSTM and what its backward pass reads.
pub(super) struct LstmTape {
    hidden: usize,
    batch: usize,
    /// `U`: `[hidden, 4 · hidden]`.
    w_h: Tensor<2>,
    /// Per step, the sigmoid of the input, forget and output gates:
    /// `[batch, 3 · hidden]`.
    ifo: Vec<Tensor<2>>,
    /// Per step, the tanh of the candidate: `[batch, hidden]`.
    g: Vec<Tensor<2>>,
    /// Per step, the cell state `c_t`.
    c: Vec<Tensor<2>>,
    /// Per step, `tanh(c_t)`.
    k: Vec<Tensor<2>>,
    /// Per step, the hidden state `h_t`.
    h: Vec<Tensor<2>>,
}

impl LstmTape {
    /// Runs the LSTM over `steps` steps of `batch` rows each.
    ///
    /// # Shapes
    /// - `z_x`: `[steps · batch, 4 · hidden]`, the input's share of the
    ///   gates with their biases, step after step
    /// - `w_h`: `[hidden, 4 · hidden]`
    pub(super) fn forward(z_x: Tensor<2>, w_h: Tensor<2>, steps: usize, batch: usize) -> Self {
        let [hidden, _] = w_h.dims();
        let mut tape = Self {
            hidden,
            batch,
            w_h,
            ifo: Vec::with_capacity(steps),
            g: Vec::with_capacity(steps),
            c: Vec::with_capacity(steps),
            k: Vec::with_capacity(steps),
            h: Vec::with_capacity(steps),
        };
        for t in 0..steps {
            let z_t = z_x.clone().slice(s![t * batch..(t + 1) * batch, ..]);
            let z = match tape.h.last() {
                Some(h) => z_t + h.clone().matmul(tape.w_h.clone()),
                None => z_t,
            }; // [batch, 4 · hidden]
            let ifo = sigmoid(z.clone().slice(s![.., 0..3 * hidden]));
            let g = z.slice(s![.., 3 * hidden..4 * hidden]).tanh();
            let ig = ifo.clone().slice(s![.., 0..hidden]) * g.clone();
            let c = match tape.c.last() {
                Some(c) => ifo.clone().slice(s![.., hidden..2 * hidden]) * c.clone() + ig,
                None => ig,
            };
            let k = c.clone().tanh();
            let h = ifo.clone().slice(s![.., 2 * hidden..3 * hidden]) * k.clone();
            tape.ifo.push(ifo);
            tape.g.push(g);
            tape.c.push(c);
            tape.k.push(k);
            tape.h.push(h);
        }
        tape
    }

    /// The hidden state after the last step (zero without steps):
    /// `[batch, hidden]`.
    pub(super) fn last_hidden(&self) -> Tensor<2> {
        match self.h.last() {
            Some(h) => h.clone(),
            None => Tensor::<2>::zeros([self.batch, self.hidden], &self.w_h.device()),
        }
    }

    /// The gradients of the input's share of the gates (`[steps · batch, 4 ·
    /// hidden]`) and of `U` (`[hidden, 4 · hidden]`), from that of the last
    /// hidden state (`[batch, hidden]`).
    pub(super) fn backward(&self, d_last: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
        let hidden = self.hidden;
        let steps = self.h.len();
        let device = self.w_h.device();
        if steps == 0 {
            return (
                Tensor::<2>::zeros([0, 4 * hidden], &device),
                Tensor::<2>::zeros([hidden, 4 * hidden], &device),
            );
        }
        let w_h_t = self.w_h.clone().transpose(); // [4 · hidden, hidden]
        let mut d_z = vec![None; steps];
        let mut d_h = d_last;
        let mut d_c: Option<Tensor<2>> = None;
        for t in (0..steps).rev() {
            let ifo = &self.ifo[t];
            let (g, k) = (&self.g[t], &self.k[t]);
            let o = ifo.clone().slice(s![.., 2 * hidden..3 * hidden]);
            let d_o = d_h.clone() * k.clone();
            // through tanh(c_t): (1 − k²)
            let d_k = d_h * o;
            let mut d_ct = d_k.clone() - d_k * k.clone().square();
            if let Some(d_c) = d_c {
                d_ct = d_ct + d_c;
            }
            let i = ifo.clone().slice(s![.., 0..hidden]);
            let d_i = d_ct.clone() * g.clone();
            let d_g = d_ct.clone() * i;
            let d_f = match t {
                0 => Tensor::<2>::zeros([self.batch, hidden], &device),
                _ => d_ct.clone() * self.c[t - 1].clone(),
            };
            let f = ifo.clone().slice(s![.., hidden..2 * hidden]);
            d_c = Some(d_ct * f);
            // through the sigmoids: a (1 − a); through the candidate's tanh: 1 − g²
            let d_ifo = Tensor::cat(vec![d_i, d_f, d_o], 1);
            let d_ifo = d_ifo.clone() * ifo.clone() - d_ifo * ifo.clone().square();
            let d_cand = d_g.clone() - d_g * g.clone().square();
            let d_zt = Tensor::cat(vec![d_ifo, d_cand], 1); // [batch, 4 · hidden]
            if t > 0 {
                d_h = d_zt.clone().matmul(w_h_t.clone());
            } else {
                d_h = Tensor::<2>::zeros([self.batch, hidden], &device);
            }
            d_z[t] = Some(d_zt);
        }
        let d_z: Vec<Tensor<2>> = d_z.into_iter().flatten().collect();
        let d_z = Tensor::cat(d_z, 0); // [steps · batch, 4 · hidden]
                                       // U's gradient: Σ_{t ≥ 1} h_{t−1}ᵀ · dz_t, one product
        let d_w_h = if steps > 1 {
            let h_prev = Tensor::cat(self.h[..steps - 1].to_vec(), 0); // [(steps − 1) · batch, hidden]
            let d_z_next = d_z.clone().slice(s![self.batch..steps * self.batch, ..]);
            h_prev.transpose().matmul(d_z_next)
        } else {
            Tensor::<2>::zeros([hidden, 4 * hidden], &device)
        };
        (d_z, d_w_h)
    }
}
