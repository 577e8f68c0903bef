//! The optimisers the shard owners step — Adam and plain gradient descent —
//! one coordinate at a time, so a parameter shard can step on its own.
//!
//! The update of coordinate `j` depends only on coordinate `j`'s gradient history,
//! so sharding the parameters across any number of owners gives bit-identical
//! results.

use crate::workload::vector::by_features;

/// Which rule steps the parameters (`[model] optimizer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKind {
    /// Adam (Kingma & Ba) on the mean gradient.
    Adam,
    /// Plain gradient descent on the mean gradient: `w ← w − lr · (Σ g / rows
    /// + l2 · w)`. Under BSP the Σ is the fixed-order sum of the iteration's
    /// units, so this is mini-batch descent on their summed per-row updates,
    /// each per-row step `lr / rows` long.
    Sgd,
    /// Adds the summed updates as they are: `w ← w + Σ Δ` (LDA's count
    /// deltas). Not a job-file choice: the workload that sends deltas sets it.
    Add,
    /// Writes the values the units sent, `w ← v`, where a unit sends `v + 1`
    /// so that a coordinate no unit wrote sums to 0 and is left as it is
    /// ([`write_into`]). Every value written must be ≥ 0, and no two units
    /// of one iteration may write the same coordinate. LDA's tokens' topics
    /// under policies that read stale parameters or drop units, where
    /// deltas relative to the topics a unit read would corrupt the counts.
    /// Not a job-file choice.
    Set,
}

/// The value a unit sends to write `value` under [`OptimizerKind::Set`].
pub fn written(value: f64) -> f64 {
    value + 1.0
}

/// Writes the coordinates `sum` wrote ([`OptimizerKind::Set`]): each one
/// that is not 0 holds a value plus 1; `params` and `sum` cover the same
/// coordinates.
pub fn write_into(params: &mut [f64], sum: &[f64]) {
    for (w, &s) in params.iter_mut().zip(sum) {
        if s != 0.0 {
            *w = s - 1.0;
        }
    }
}

impl OptimizerKind {
    /// The kind a job file names, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "adam" => Some(Self::Adam),
            "sgd" => Some(Self::Sgd),
            _ => None,
        }
    }

    /// The names job files may use.
    pub const NAMES: [&'static str; 2] = ["adam", "sgd"];
}

/// The optimiser's knobs and the L2 penalty.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct OptimizerConfig {
    /// Adam or plain descent.
    pub kind: OptimizerKind,
    /// Step size.
    pub learning_rate: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the root of the second moment.
    pub epsilon: f64,
    /// L2 penalty `l2/2 · ‖w‖²` on the coordinates the workload penalises
    /// (every weight but the biases).
    pub l2: f64,
}

/// Optimiser state for a contiguous range of coordinates (a shard). Plain
/// descent keeps the moments at zero, so checkpoints have one shape.
#[derive(Debug, Clone)]
pub struct Optimizer {
    config: OptimizerConfig,
    penalised: Vec<bool>,
    m: Vec<f64>,
    v: Vec<f64>,
    steps: i32,
}

impl Optimizer {
    /// State for a shard of `penalised.len()` coordinates, of which those
    /// marked in `penalised` carry the L2 penalty.
    pub fn new(config: OptimizerConfig, penalised: Vec<bool>) -> Self {
        let len = penalised.len();
        Self {
            config,
            penalised,
            m: vec![0.0; len],
            v: vec![0.0; len],
            steps: 0,
        }
    }

    /// The moments and the step count, for a checkpoint.
    pub fn state(&self) -> (&[f64], &[f64], i32) {
        (&self.m, &self.v, self.steps)
    }

    /// Continues from a checkpoint's moments and step count.
    ///
    /// # Panics
    /// If the moments do not cover this shard (the loader checks that).
    pub fn restore(&mut self, m: &[f64], v: &[f64], steps: i32) {
        assert!(m.len() == self.m.len() && v.len() == self.v.len());
        self.m.copy_from_slice(m);
        self.v.copy_from_slice(v);
        self.steps = steps;
    }

    /// One step: `params` and `grad_sum` cover this shard's coordinates; the
    /// gradient of the mean loss is `grad_sum / rows`.
    pub fn step(&mut self, params: &mut [f64], grad_sum: &[f64], rows: f64) {
        let c = self.config;
        self.steps += 1;
        if c.kind == OptimizerKind::Add {
            for (w, d) in params.iter_mut().zip(grad_sum) {
                *w += d;
            }
            return;
        }
        if c.kind == OptimizerKind::Set {
            write_into(params, grad_sum);
            return;
        }
        if c.kind == OptimizerKind::Sgd {
            for (k, (w, g_sum)) in params.iter_mut().zip(grad_sum).enumerate() {
                let mut g = g_sum / rows;
                if self.penalised[k] {
                    g += c.l2 * *w;
                }
                *w -= c.learning_rate * g;
            }
            return;
        }
        let bias = (
            1.0 - c.beta1.powi(self.steps),
            1.0 - c.beta2.powi(self.steps),
        );
        let moments = (&self.penalised[..], &mut self.m[..], &mut self.v[..]);
        adam(&c, bias, rows, params, grad_sum, moments);
    }
}

by_features! {
    /// Adam's step of a shard's coordinates, with the bias corrections
    /// `bias` = (1 − β₁ᵗ, 1 − β₂ᵗ) and the shard's (penalised, m, v).
    fn adam(
        c: &OptimizerConfig,
        bias: (f64, f64),
        rows: f64,
        params: &mut [f64],
        grad_sum: &[f64],
        moments: (&[bool], &mut [f64], &mut [f64]),
    ) => adam_in;
}

/// [`adam`], inlined into each feature's copy. Each coordinate takes the
/// same IEEE operations in the same order whatever the copy (the penalty
/// is added to every gradient and kept where the coordinate is penalised:
/// a select, where a branch kept the loop scalar), so every copy gives the
/// same bits. 300,000 coordinates (a W = 1 run of the CNN) took 1.04 ms
/// as a scalar loop and take 0.46 ms compiled for AVX-512 (its divisions
/// and root eight at a time) on an AMD EPYC.
#[inline(always)]
fn adam_in(
    c: &OptimizerConfig,
    (bias1, bias2): (f64, f64),
    rows: f64,
    params: &mut [f64],
    grad_sum: &[f64],
    (penalised, m, v): (&[bool], &mut [f64], &mut [f64]),
) {
    // (cut to one length, the coordinates both cover as the zip of the
    // plain loop had it: no bounds checks in the loop)
    let n = params.len().min(grad_sum.len());
    let (params, grad_sum) = (&mut params[..n], &grad_sum[..n]);
    let (penalised, m, v) = (&penalised[..n], &mut m[..n], &mut v[..n]);
    for k in 0..n {
        let w = params[k];
        let plain = grad_sum[k] / rows;
        let with_penalty = plain + c.l2 * w;
        let g = if penalised[k] { with_penalty } else { plain };
        let mk = c.beta1 * m[k] + (1.0 - c.beta1) * g;
        let vk = c.beta2 * v[k] + (1.0 - c.beta2) * g * g;
        m[k] = mk;
        v[k] = vk;
        let m_hat = mk / bias1;
        let v_hat = vk / bias2;
        params[k] = w - c.learning_rate * m_hat / (v_hat.sqrt() + c.epsilon);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> OptimizerConfig {
        OptimizerConfig {
            kind: OptimizerKind::Adam,
            learning_rate: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            l2: 0.0,
        }
    }

    /// Adam's first step moves every coordinate by about the learning rate against
    /// the sign of its gradient: m̂ = g, v̂ = g², so Δw = -lr · g / (|g| + ε).
    #[test]
    fn first_step_is_learning_rate_times_sign() {
        let mut adam = Optimizer::new(config(), vec![false, true]);
        let mut w = vec![0.0, 0.0];
        adam.step(&mut w, &[4.0, -2.0], 2.0);
        assert!((w[0] + 0.1).abs() < 1e-7);
        assert!((w[1] - 0.1).abs() < 1e-7);
    }

    #[test]
    fn a_descent_step_moves_against_the_mean_gradient_and_the_penalty() {
        let mut sgd = Optimizer::new(
            OptimizerConfig {
                kind: OptimizerKind::Sgd,
                l2: 0.5,
                ..config()
            },
            vec![false, true],
        );
        let mut w = vec![1.0, 1.0];
        sgd.step(&mut w, &[4.0, 4.0], 2.0);
        // mean gradient 2; the second also 0.5 · 1 of penalty
        assert_eq!(w, vec![1.0 - 0.1 * 2.0, 1.0 - 0.1 * 2.5]);
        assert_eq!(sgd.state().0, &[0.0, 0.0], "no moments");
        assert_eq!(OptimizerKind::from_name("sgd"), Some(OptimizerKind::Sgd));
        assert_eq!(OptimizerKind::from_name("SGD"), None);
        let mut add = Optimizer::new(
            OptimizerConfig {
                kind: OptimizerKind::Add,
                ..config()
            },
            vec![true, true],
        );
        let mut counts = vec![3.0, 0.0];
        add.step(&mut counts, &[-1.0, 2.0], 7.0);
        assert_eq!(counts, vec![2.0, 2.0], "deltas added as they are");
        let mut set = Optimizer::new(
            OptimizerConfig {
                kind: OptimizerKind::Set,
                ..config()
            },
            vec![true; 3],
        );
        let mut topics = vec![3.0, 5.0, 1.0];
        set.step(&mut topics, &[written(0.0), 0.0, written(7.0)], 7.0);
        assert_eq!(
            topics,
            vec![0.0, 5.0, 7.0],
            "written, and the unwritten kept"
        );
    }

    /// The step in the copy compiled for this CPU's vector units, and in the
    /// baseline copy, give the bits of Adam written as a plain loop with a
    /// branch, one coordinate at a time (the rule the digests were first
    /// taken with), over coordinates some penalised and some not, through
    /// many steps, at lengths that leave a remainder after every vector
    /// width.
    #[test]
    fn every_copy_of_adam_gives_the_plain_loops_bits() {
        let c = OptimizerConfig {
            learning_rate: 1e-3,
            l2: 1e-4,
            ..config()
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut draw = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        for n in [1usize, 7, 8, 9, 17, 1001] {
            let penalised: Vec<bool> = (0..n).map(|k| k % 3 != 0).collect();
            let mut adam = Optimizer::new(c, penalised.clone());
            let mut w: Vec<f64> = (0..n).map(|_| draw()).collect();
            let (mut w_ref, mut m, mut v) = (w.clone(), vec![0.0; n], vec![0.0; n]);
            let (mut w_base, mut m_base, mut v_base) = (w.clone(), vec![0.0; n], vec![0.0; n]);
            for t in 1..=40 {
                let g: Vec<f64> = (0..n).map(|_| 10.0 * draw()).collect();
                adam.step(&mut w, &g, 32.0);
                let bias1 = 1.0 - c.beta1.powi(t);
                let bias2 = 1.0 - c.beta2.powi(t);
                let moments = (&penalised[..], &mut m_base[..], &mut v_base[..]);
                adam_in(&c, (bias1, bias2), 32.0, &mut w_base, &g, moments);
                for k in 0..n {
                    let mut gk = g[k] / 32.0;
                    if penalised[k] {
                        gk += c.l2 * w_ref[k];
                    }
                    m[k] = c.beta1 * m[k] + (1.0 - c.beta1) * gk;
                    v[k] = c.beta2 * v[k] + (1.0 - c.beta2) * gk * gk;
                    let m_hat = m[k] / bias1;
                    let v_hat = v[k] / bias2;
                    w_ref[k] -= c.learning_rate * m_hat / (v_hat.sqrt() + c.epsilon);
                }
            }
            let bits = |x: &[f64]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&w), bits(&w_ref), "{n} coordinates");
            assert_eq!(bits(&w_base), bits(&w_ref), "{n} coordinates");
            assert_eq!(bits(adam.state().0), bits(&m));
            assert_eq!(bits(adam.state().1), bits(&v_base));
        }
    }

    #[test]
    fn sharded_steps_equal_whole_steps_bit_for_bit() {
        let grads = [[0.3, -1.0, 2.5, 0.01], [0.1, 0.2, -0.3, 0.4]];
        let mut whole = Optimizer::new(
            OptimizerConfig {
                l2: 0.01,
                ..config()
            },
            vec![false, true, true, true],
        );
        let mut w = vec![0.5, -0.5, 1.0, 2.0];
        let mut left = Optimizer::new(
            OptimizerConfig {
                l2: 0.01,
                ..config()
            },
            vec![false],
        );
        let mut right = Optimizer::new(
            OptimizerConfig {
                l2: 0.01,
                ..config()
            },
            vec![true, true, true],
        );
        let mut w2 = w.clone();
        for g in grads {
            whole.step(&mut w, &g, 3.0);
            let (a, b) = w2.split_at_mut(1);
            left.step(a, &g[..1], 3.0);
            right.step(b, &g[1..], 3.0);
        }
        assert_eq!(w, w2);
    }

    #[test]
    fn a_restored_state_continues_bit_for_bit() {
        let grads = [[0.3, -1.0], [0.1, 0.2], [-0.7, 0.05]];
        let mut whole = Optimizer::new(config(), vec![true, false]);
        let mut w = vec![0.5, -0.5];
        whole.step(&mut w, &grads[0], 2.0);
        let (m, v, steps) = whole.state();
        let mut resumed = Optimizer::new(config(), vec![true, false]);
        resumed.restore(m, v, steps);
        let mut w2 = w.clone();
        for g in &grads[1..] {
            whole.step(&mut w, g, 2.0);
            resumed.step(&mut w2, g, 2.0);
        }
        assert_eq!(w, w2);
    }
}
