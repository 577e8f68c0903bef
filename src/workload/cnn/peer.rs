//! The peer check's plain burn training loop: the same net, burn's own Adam
//! (f32, β = 0.9 / 0.999, ε = 1e-8), no timely, no shards, no flat buffers.

use std::time::Instant;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};

use super::net::{weighted_bce_sum, CnnNet};

/// What the plain burn loop produced.
#[derive(Debug, Clone, PartialEq)]
pub struct PlainBurnRun {
    /// Mean weighted training loss of each step, at the parameters it started
    /// from (Σ loss sums / images in the step).
    pub losses: Vec<f64>,
    /// The final parameters, flattened in the net's layout order.
    pub params: Vec<f64>,
    /// Wall time of each step, µs.
    pub step_us: Vec<u64>,
}

/// Trains `net` from `init` with burn's Adam: step `s` is one optimiser step on
/// the units of `steps[s]` (each a list of image indices into `pixels`,
/// `labels` and `weights`), the gradient of (Σ over its units of their weighted
/// loss sums) / (images in the step).
///
/// Each unit is a forward and a backward of its own (as a worker computes it);
/// burn's `GradientsAccumulator` sums the units' gradients, which equals the
/// gradient of the sum because differentiation is linear. Each unit's loss is
/// divided by the step's image count before its backward, so the accumulated
/// gradient is that of the mean.
///
/// # Panics
/// If `init` is not `net.param_count()` long or an index lies beyond the
/// images of `pixels`, `labels` or `weights`: the caller builds both from the
/// same net and data, so either is a broken invariant, not bad user input.
pub fn train_plain_burn(
    net: &CnnNet,
    init: &[f64],
    pixels: &[f32],
    labels: &[f32],
    weights: &[f32],
    steps: &[Vec<Vec<u32>>],
    learning_rate: f64,
) -> PlainBurnRun {
    let device = Device::flex().autodiff();
    let per_image = net.config().side * net.config().side;
    let mut model = net
        .module(init, &device)
        .expect("the initial parameters come from the same net");
    let mut optim = AdamConfig::new()
        .with_beta_1(0.9)
        .with_beta_2(0.999)
        .with_epsilon(1e-8)
        .init();
    let mut losses = Vec::with_capacity(steps.len());
    let mut step_us = Vec::with_capacity(steps.len());
    for units in steps {
        let started = Instant::now();
        let images: usize = units.iter().map(Vec::len).sum();
        let scale = 1.0 / images.max(1) as f64;
        let mut accumulator = GradientsAccumulator::new();
        let mut loss_sum = 0.0;
        for unit in units {
            let n = unit.len();
            if n == 0 {
                continue;
            }
            let mut x = Vec::with_capacity(n * per_image);
            let mut y = Vec::with_capacity(n);
            let mut w = Vec::with_capacity(n);
            for &i in unit {
                let i = i as usize;
                x.extend_from_slice(&pixels[i * per_image..(i + 1) * per_image]);
                y.push(labels[i]);
                w.push(weights[i]);
            }
            let z = model.forward(net.images(&x, n, &device), net.config(), None); // [n, 1]
            let y = Tensor::<2>::from_data(TensorData::new(y, [n, 1]), &device);
            let w = Tensor::<2>::from_data(TensorData::new(w, [n, 1]), &device);
            let loss = weighted_bce_sum(z, y, w); // [1]
            loss_sum += f64::from(
                loss.clone()
                    .into_data()
                    .convert::<f32>()
                    .as_slice::<f32>()
                    .expect("converted to f32")[0],
            );
            let grads = GradientsParams::from_grads((loss * scale).backward(), &model);
            accumulator.accumulate(&model, grads);
        }
        model = optim.step(learning_rate, model, accumulator.grads());
        losses.push(loss_sum * scale);
        step_us.push(started.elapsed().as_micros() as u64);
    }
    PlainBurnRun {
        losses,
        params: net.flatten(&model.valid()),
        step_us,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::workload::cnn::CnnConfig;

    /// Bright images are class 1, dark ones class 0.
    pub(super) fn toy(n: usize, side: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut pixels = Vec::with_capacity(n * side * side);
        let mut labels = Vec::with_capacity(n);
        for i in 0..n {
            let bright = i % 2 == 0;
            for j in 0..side * side {
                let noise = ((i * 31 + j * 17) % 13) as f32 / 13.0 * 0.2;
                pixels.push(if bright { 0.7 + noise } else { 0.1 + noise });
            }
            labels.push(if bright { 1.0 } else { 0.0 });
        }
        (pixels, labels, vec![1.0; n])
    }

    /// burn's Adam over burn's own autodiff and our per-coordinate Adam over
    /// the flat gradient agree step by step: the plain burn loop is a fair
    /// yardstick for the runtime.
    #[test]
    fn burn_adam_and_the_flat_adam_follow_the_same_curve() {
        let net = CnnNet::new(CnnConfig {
            side: 8,
            kernel: 3,
            filters: [2, 3, 4],
            pool_after: [true, true, false],
            lstm_hidden: 3,
        });
        let init = net.init_params(11);
        let (x, y, w) = toy(16, 8);
        let steps: Vec<Vec<Vec<u32>>> = (0..20)
            .map(|_| vec![(0..8).collect(), (8..16).collect()])
            .collect();
        let run = train_plain_burn(&net, &init, &x, &y, &w, &steps, 0.01);
        let mut params = init.clone();
        let mut adam = crate::workload::Optimizer::new(
            crate::workload::OptimizerConfig {
                kind: crate::workload::OptimizerKind::Adam,
                learning_rate: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                epsilon: 1e-8,
                l2: 0.0,
            },
            vec![true; params.len()],
        );
        for (s, burn_loss) in run.losses.iter().enumerate() {
            let g = net.gradient(&params, &x, &y, &w).expect("fits");
            let ours = g.loss_sum / 16.0;
            assert!(
                (ours - burn_loss).abs() < 1e-4 * burn_loss.abs().max(1.0),
                "step {s}: flat {ours} vs burn {burn_loss}"
            );
            adam.step(&mut params, &g.grad, 16.0);
        }
        assert!(run.losses[19] < run.losses[0], "{:?}", run.losses);
        assert_eq!(run.params.len(), net.param_count());
        assert_eq!(run.step_us.len(), 20);
    }
}
