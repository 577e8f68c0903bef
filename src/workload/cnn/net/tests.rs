//! The net against finite differences, burn's own convolutions, and itself
//! on other threads and from kept modules.

use super::*;

pub(super) fn tiny() -> CnnNet {
    CnnNet::new(CnnConfig {
        side: 8,
        kernel: 3,
        filters: [2, 3, 4],
        pool_after: [true, true, false],
        lstm_hidden: 3,
    })
}

pub(super) fn batch(n: usize, side: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let pixels = (0..n * side * side)
        .map(|i| ((i * 37 % 101) as f32) / 101.0)
        .collect();
    let labels = (0..n).map(|i| (i % 2) as f32).collect();
    let weights = (0..n).map(|i| 1.0 + i as f32 * 0.5).collect();
    (pixels, labels, weights)
}

#[test]
fn layout_covers_the_vector_and_names_the_tensors() {
    let net = tiny();
    let total: usize = net
        .layout()
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum();
    assert_eq!(total, net.param_count());
    assert_eq!(net.layout()[0].name, "conv1.weight");
    assert_eq!(net.layout()[0].shape, vec![2, 1, 3, 3]);
    assert!(net.layout().iter().any(|s| s.name.starts_with("lstm.")));
    assert_eq!(
        net.layout().last().map(|s| s.name.as_str()),
        Some("head.bias")
    );
    // the pneumonia net: convolutions 832 + 51,264 + 204,928, the LSTM's
    // four gates 4 × (128·64 + 64 + 64·64 + 64) = 49,664, the head 65
    let real = CnnNet::new(CnnConfig::pneumonia());
    let names: Vec<&str> = real.layout().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(real.param_count(), 306_753, "{names:?}");
}

#[test]
fn init_is_seeded() {
    let net = tiny();
    let a = net.init_params(7);
    assert_eq!(a, net.init_params(7));
    assert_ne!(a, net.init_params(8));
    assert_eq!(a.len(), net.param_count());
}

#[test]
fn gradient_matches_finite_differences() {
    let net = tiny();
    let params = net.init_params(3);
    let (x, y, w) = batch(3, 8);
    let g = net.gradient(&params, &x, &y, &w).expect("batch fits");
    // a few coordinates of every tensor
    for slot in net.layout() {
        let len: usize = slot.shape.iter().product();
        for k in [0, len / 2, len - 1] {
            let j = slot.offset + k;
            // small: a larger step crosses ReLU and max-pool kinks
            let h = 1e-3;
            let mut up = params.clone();
            up[j] += h;
            let mut down = params.clone();
            down[j] -= h;
            let fd = (net.gradient(&up, &x, &y, &w).expect("fits").loss_sum
                - net.gradient(&down, &x, &y, &w).expect("fits").loss_sum)
                / (2.0 * h);
            let tolerance = 1e-3 + 0.05 * fd.abs().max(g.grad[j].abs());
            assert!(
                (fd - g.grad[j]).abs() < tolerance,
                "{} [{k}]: finite difference {fd}, gradient {}",
                slot.name,
                g.grad[j]
            );
        }
    }
}

#[test]
fn repeated_and_other_thread_calls_are_bit_identical() {
    let net = tiny();
    let params = net.init_params(5);
    let (x, y, w) = batch(4, 8);
    let a = net.gradient(&params, &x, &y, &w).expect("fits");
    let b = net.gradient(&params, &x, &y, &w).expect("fits");
    assert_eq!(a, b);
    let threads_before = std::fs::read_dir("/proc/self/task").map(|d| d.count()).ok();
    let (net2, p2, x2, y2, w2) = (net.clone(), params.clone(), x.clone(), y.clone(), w.clone());
    let c = std::thread::spawn(move || net2.gradient(&p2, &x2, &y2, &w2).expect("fits"))
        .join()
        .expect("thread");
    assert_eq!(a, c);
    let _ = net.gradient(&params, &x, &y, &w);
    let threads_after = std::fs::read_dir("/proc/self/task").map(|d| d.count()).ok();
    // other tests run beside this one, so only "no pool of threads appeared"
    if let (Some(before), Some(after)) = (threads_before, threads_after) {
        assert!(
            after <= before + 4,
            "burn started threads: {before} -> {after}"
        );
    }
}

/// Kept weights give the bits of a fresh conversion:
/// the gradient at `a` after calls at other parameters, at `a` again
/// (kept), after predictions, other batch sizes and another net on the
/// same thread, equals that of a new thread (nothing kept), and one
/// changed bit is a different vector.
#[test]
fn kept_weights_give_the_bits_of_a_fresh_conversion() {
    let net = tiny();
    let a = net.init_params(5);
    let b = net.init_params(6);
    let (x, y, w) = batch(4, 8);
    let (x3, y3, w3) = batch(3, 8);
    let fresh = {
        let (net, a, x, y, w) = (net.clone(), a.clone(), x.clone(), y.clone(), w.clone());
        std::thread::spawn(move || net.gradient(&a, &x, &y, &w).expect("fits"))
            .join()
            .expect("thread")
    };
    let other = CnnNet::new(CnnConfig {
        filters: [3, 2, 4],
        ..net.config().clone()
    });
    let other_params = other.init_params(5);
    let mut seen = Vec::new();
    for params in [&a, &b, &a, &a] {
        seen.push(net.gradient(params, &x, &y, &w).expect("fits"));
        let _ = net.predict(params, &x).expect("fits");
        let _ = net.gradient(params, &x3, &y3, &w3).expect("fits");
        let _ = net.predict(params, &x3).expect("fits");
        let _ = other.gradient(&other_params, &x, &y, &w).expect("fits");
    }
    assert_eq!(seen[0], fresh);
    assert_eq!(seen[2], fresh);
    assert_eq!(seen[3], fresh);
    assert_ne!(seen[1], fresh);
    let mut nudged = a.clone();
    nudged[0] = f64::from_bits(nudged[0].to_bits() ^ (1 << 40));
    let g = net.gradient(&nudged, &x, &y, &w).expect("fits");
    let g_fresh = std::thread::spawn({
        let (net, x, y, w) = (net.clone(), x.clone(), y.clone(), w.clone());
        move || net.gradient(&nudged, &x, &y, &w).expect("fits")
    })
    .join()
    .expect("thread");
    assert_eq!(g, g_fresh);
    assert_ne!(g, fresh, "a changed parameter reused the old module");
    assert!(net.gradient(&a[1..], &x, &y, &w).is_err());
}

/// The loss, its gradient (layout order) and the predictions, through
/// burn's autodiff, of the matrix form of the convolutions in burn's tensors
/// (`direct` false, with `dropout` in training) or of burn's own `Conv2d`
/// and `MaxPool2d` (`direct` true).
fn both_forms(
    net: &CnnNet,
    params: &[f64],
    n: usize,
    direct: bool,
    dropout: Option<&Dropout>,
) -> (f64, Vec<f64>, Vec<f32>) {
    let side = net.config().side;
    let (x, y, w) = batch(n, side);
    let device = Device::flex().autodiff();
    let module = net.module(params, &device).expect("fits");
    let forward = |images, dropout| {
        if direct {
            module.forward_direct(images, net.config())
        } else {
            module.forward(images, net.config(), dropout)
        }
    };
    let z = forward(net.images(&x, n, &device), dropout);
    let y = Tensor::<2>::from_data(TensorData::new(y, [n, 1]), &device);
    let w = Tensor::<2>::from_data(TensorData::new(w, [n, 1]), &device);
    let loss = weighted_bce_sum(z, y, w);
    let loss_sum = f64::from(
        loss.clone()
            .into_data()
            .convert::<f32>()
            .as_slice::<f32>()
            .expect("f32")[0],
    );
    let grads = GradientsParams::from_grads(loss.backward(), &module);
    let mut reader = Reader {
        path: Vec::new(),
        slots: Vec::new(),
        values: Vec::new(),
        grads: Some(grads),
        count: 0,
    };
    module.visit(&mut reader);
    let p = sigmoid(forward(net.images(&x, n, &device), None))
        .into_data()
        .convert::<f32>()
        .as_slice::<f32>()
        .expect("f32")
        .to_vec();
    (loss_sum, reader.values, p)
}

/// Each coordinate of `grad` within 1e-4 of the largest of its tensor in
/// `reference` (f32 rounding, summed in other orders).
fn assert_close_by_tensor(net: &CnnNet, grad: &[f64], reference: &[f64], what: &str) {
    assert_eq!(grad.len(), reference.len(), "{what}");
    for slot in net.layout() {
        let len: usize = slot.shape.iter().product();
        let range = slot.offset..slot.offset + len;
        let scale = reference[range.clone()]
            .iter()
            .fold(0.0f64, |m, v| m.max(v.abs()));
        let pairs = grad[range.clone()].iter().zip(&reference[range]);
        for (k, (a, b)) in pairs.enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * scale,
                "{what}: {} [{k}]: {a} vs {b} (largest {scale})",
                slot.name
            );
        }
    }
}

/// The convolutions as gathered matrix products are burn's `Conv2d`
/// ("same" padding) and `MaxPool2d`, up to the order of the sums: the
/// same loss, gradient and predictions to within f32 rounding, on the
/// pneumonia net, on a small net with odd map sides (pooling drops a row
/// and a column) and on one with an even kernel (padding 1 before, 2
/// after).
#[test]
fn matrix_convolutions_are_burns_convolutions() {
    let small = |side, kernel| {
        CnnNet::new(CnnConfig {
            side,
            kernel,
            filters: [2, 3, 4],
            pool_after: [true, true, false],
            lstm_hidden: 3,
        })
    };
    for (net, n) in [
        (CnnNet::new(CnnConfig::pneumonia()), 3),
        (small(7, 3), 4),
        (small(9, 4), 2),
        (tiny(), 5),
    ] {
        let params = net.init_params(11);
        let (loss, grad, p) = both_forms(&net, &params, n, false, None);
        let (loss_direct, grad_direct, p_direct) = both_forms(&net, &params, n, true, None);
        let what = format!("{:?}", net.config());
        assert!(
            (loss - loss_direct).abs() <= 1e-5 * loss_direct.abs().max(1.0),
            "{what}: loss {loss} vs {loss_direct}"
        );
        for (a, b) in p.iter().zip(&p_direct) {
            assert!((a - b).abs() <= 1e-5, "{what}: prediction {a} vs {b}");
        }
        assert_eq!(grad.len(), grad_direct.len());
        // not vacuous: the loss reaches the parameters
        assert!(grad_direct.iter().any(|&g| g != 0.0), "{what}: no gradient");
        assert_close_by_tensor(&net, &grad, &grad_direct, &what);
    }
}

#[test]
fn weights_scale_each_image() {
    let net = tiny();
    let params = net.init_params(1);
    let (x, y, _) = batch(2, 8);
    let one = net.gradient(&params, &x, &y, &[1.0, 0.0]).expect("fits");
    let two = net.gradient(&params, &x, &y, &[2.0, 0.0]).expect("fits");
    assert!((two.loss_sum - 2.0 * one.loss_sum).abs() < 1e-5 * one.loss_sum.abs().max(1.0));
    let both = net.gradient(&params, &x, &y, &[1.0, 1.0]).expect("fits");
    let other = net.gradient(&params, &x, &y, &[0.0, 1.0]).expect("fits");
    assert!((both.loss_sum - one.loss_sum - other.loss_sum).abs() < 1e-5);
}

#[test]
fn predictions_are_probabilities_and_bad_batches_are_refused() {
    let net = tiny();
    let params = net.init_params(2);
    let (x, _, _) = batch(3, 8);
    let p = net.predict(&params, &x).expect("fits");
    assert_eq!(p.len(), 3);
    assert!(p.iter().all(|&q| (0.0..=1.0).contains(&q)));
    let err = net
        .gradient(&params, &x[..10], &[1.0], &[1.0])
        .expect_err("10 pixels are not an 8 × 8 image");
    assert!(err.to_string().contains("needs 64 pixels"), "{err}");
    assert!(net
        .gradient(&params[1..], &x, &[0.0; 3], &[1.0; 3])
        .is_err());
}

#[test]
fn the_pneumonia_net_runs_on_two_images() {
    let net = CnnNet::new(CnnConfig::pneumonia());
    assert_eq!(net.config().map_side(), 7); // the LSTM reads 49 steps
    let params = net.init_params(4);
    let (x, y, w) = batch(2, 28);
    let g = net.gradient(&params, &x, &y, &w).expect("fits");
    assert_eq!(g.grad.len(), 306_753);
    assert!(g.loss_sum.is_finite() && g.loss_sum > 0.0, "{}", g.loss_sum);
    assert!(g.grad.iter().all(|v| v.is_finite()));
    // every tensor is reached by the loss
    for slot in net.layout() {
        let len: usize = slot.shape.iter().product();
        let block = &g.grad[slot.offset..slot.offset + len];
        assert!(
            block.iter().any(|&v| v != 0.0),
            "{} has no gradient",
            slot.name
        );
    }
    assert_eq!(g, net.gradient(&params, &x, &y, &w).expect("fits"));
    assert_eq!(net.predict(&params, &x).expect("fits").len(), 2);
}

/// The gradient with both passes written out (`layers` and `LstmTape`)
/// is burn's autodiff through the whole forward pass in burn's tensors, up
/// to the order of the sums: the same loss and gradient to within f32
/// rounding, with and without dropout, and the same predictions, on the
/// pneumonia net, a small one and one with odd sides and an even kernel
/// (its pools drop a row and a column; padding 1 before, 2 after).
#[test]
fn the_written_out_passes_are_autodiffs() {
    let odd = CnnNet::new(CnnConfig {
        side: 9,
        kernel: 4,
        filters: [2, 3, 4],
        pool_after: [true, true, false],
        lstm_hidden: 3,
    });
    for (net, n) in [
        (CnnNet::new(CnnConfig::pneumonia()), 3),
        (tiny(), 5),
        (odd, 2),
    ] {
        let params = net.init_params(13);
        let dropout = Dropout {
            rate: 0.3,
            keys: (0..n as u64).map(|i| 40 + i).collect(),
        };
        for dropout in [None, Some(&dropout)] {
            let (loss_autodiff, grad_autodiff, p_autodiff) =
                both_forms(&net, &params, n, false, dropout);
            let (x, y, w) = batch(n, net.config().side);
            let g = net
                .gradient_with(&params, &x, &y, &w, dropout)
                .expect("fits");
            let what = format!("{:?} {dropout:?}", net.config());
            // not vacuous: the loss reaches the parameters
            assert!(
                grad_autodiff.iter().any(|&v| v != 0.0),
                "{what}: no gradient"
            );
            assert!(
                (g.loss_sum - loss_autodiff).abs() <= 1e-5 * loss_autodiff.abs().max(1.0),
                "{what}: loss {} vs {loss_autodiff}",
                g.loss_sum
            );
            assert_close_by_tensor(&net, &g.grad, &grad_autodiff, &what);
            let p = net.predict(&params, &x).expect("fits");
            assert_eq!(p.len(), n);
            for (a, b) in p.iter().zip(&p_autodiff) {
                assert!((a - b).abs() <= 1e-5, "{what}: prediction {a} vs {b}");
            }
        }
    }
}

#[test]
fn dropout_masks_are_keyed_by_image_and_scale_what_they_keep() {
    let d = Dropout {
        rate: 0.25,
        keys: vec![11, 12],
    };
    let mask = d.mask(0, 49, 16);
    assert_eq!(mask.len(), 49 * 2 * 16);
    let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64 / mask.len() as f64;
    assert!((dropped - 0.25).abs() < 0.05, "{dropped}");
    assert!(mask
        .iter()
        .all(|&m| m == 0.0 || m == (1.0f64 / 0.75) as f32));
    // Image 12's mask is the same alone as beside image 11: rows are
    // position after position, images inside.
    let alone = Dropout {
        rate: 0.25,
        keys: vec![12],
    }
    .mask(0, 49, 16);
    for p in 0..49 {
        assert_eq!(
            mask[(p * 2 + 1) * 16..(p * 2 + 2) * 16],
            alone[p * 16..(p + 1) * 16]
        );
    }
    assert_ne!(d.mask(1, 49, 16), mask, "each layer has its own mask");
}

#[test]
fn dropout_changes_the_gradient_deterministically_and_zero_is_none() {
    let net = tiny();
    let params = net.init_params(3);
    let (x, y, w) = batch(3, 8);
    let plain = net.gradient(&params, &x, &y, &w).expect("fits");
    let none = Dropout {
        rate: 0.0,
        keys: (0..3).collect(),
    };
    assert_eq!(
        net.gradient_with(&params, &x, &y, &w, Some(&none))
            .expect("fits"),
        plain
    );
    let half = Dropout {
        rate: 0.5,
        keys: (0..3).collect(),
    };
    let a = net
        .gradient_with(&params, &x, &y, &w, Some(&half))
        .expect("fits");
    assert_ne!(a, plain);
    assert_eq!(
        a,
        net.gradient_with(&params, &x, &y, &w, Some(&half))
            .expect("fits")
    );
    let short = Dropout {
        rate: 0.5,
        keys: vec![1],
    };
    assert!(net
        .gradient_with(&params, &x, &y, &w, Some(&short))
        .is_err());
}
