//! What each layer of the CNN costs, forward and backward, and what would
//! cross a cut after it: the measurement a pipeline's cut starts from
//! (issue 31: "their costs are very uneven — two convolutions dominate").
//!
//! Each layer runs as a stage of its own (`CnnNet::stage_forward` and
//! `stage_backward`, the same functions a pipeline's stages call) on
//! micro-batches of `M` consecutive PneumoniaMNIST training images, the
//! activations passed from layer to layer as a pipeline passes them; the
//! thread CPU of each call is taken. The first micro-batch of each round
//! (fresh parameters: the module is built) is left out. Prints a Markdown
//! report with the command, git revision and machine: per layer the median
//! thread CPU per image forward and backward, its share of the whole, the
//! parameters it holds and the bytes per image its output sends to the
//! next stage.
//!
//! Run: `taskset -c 0 cargo bench --bench cnn_layers` (environment: `DATA`
//! the .npz, default `data/pneumoniamnist.npz` as `forestall data fetch
//! pneumonia` writes it; `M` images per micro-batch, default 32; `ROUNDS`,
//! default 5; `BATCHES` per round, default 4).

#![allow(missing_docs)]

mod cpu;

use cpu::{env_or, load_cnn, median, thread_cpu_ms};

use forestall::bench::machine::this_machine;
use forestall::cli::run::GIT_REVISION;
use forestall::workload::cnn::net::stages::{Activation, StageInput, LAYERS};
use forestall::workload::Workload;

fn main() {
    // as the forestall binary does, before any thread starts
    forestall::malloc::keep_freed_memory();
    let (cnn, data) = load_cnn("cnn_layers");
    let m = env_or("M", 32).max(1);
    let rounds = env_or("ROUNDS", 5);
    let batches = env_or("BATCHES", 4).max(2);
    let net = cnn.net();
    let train = cnn.data().train.clone();
    let source = cnn.data().source();
    let layers = LAYERS.len();
    // per layer: CPU per image of forward and of backward, ms
    let mut forward: Vec<Vec<f64>> = vec![Vec::new(); layers];
    let mut backward: Vec<Vec<f64>> = vec![Vec::new(); layers];
    let mut sent = vec![0usize; layers];
    let mut checksum = 0.0;
    for round in 0..rounds {
        let params = cnn.init_params(2000 + round as u64);
        for b in 0..batches {
            let start = ((round * batches + b) * m) % train.len().saturating_sub(m).max(1);
            let (pixels, labels, weights) = cnn.batch(&source, &train[start..start + m]);
            let mut kept = Vec::new();
            let mut act: Option<Activation> = None;
            for layer in 0..layers {
                let input = act
                    .as_ref()
                    .map_or(StageInput::Images(&pixels), StageInput::Activation);
                let cpu = thread_cpu_ms();
                let f = net
                    .stage_forward(&params, layer..layer + 1, input, (&labels, &weights, None))
                    .expect("a layer's forward");
                let took = thread_cpu_ms() - cpu;
                if b > 0 {
                    forward[layer].push(took / m as f64);
                }
                act = f.output.clone();
                sent[layer] = act.as_ref().map_or(0, |a| a.bytes() / m);
                checksum += f.loss_sum.unwrap_or(0.0);
                kept.push(f);
            }
            let mut d: Option<Activation> = None;
            for (layer, f) in kept.into_iter().enumerate().rev() {
                let cpu = thread_cpu_ms();
                let g = net
                    .stage_backward(f, d.as_ref())
                    .expect("a layer's backward");
                let took = thread_cpu_ms() - cpu;
                if b > 0 {
                    backward[layer].push(took / m as f64);
                }
                checksum += g.grad.iter().sum::<f64>();
                d = g.d_input;
            }
        }
    }
    let machine = this_machine();
    println!("# The CNN's cost by layer\n");
    println!(
        "- command: `DATA={} M={m} ROUNDS={rounds} BATCHES={batches} cargo bench --bench cnn_layers`",
        data.display()
    );
    println!("- git revision: {GIT_REVISION}");
    println!(
        "- machine: {} ({}, {} cores, {:.1} GiB), {}, {}",
        machine.host, machine.cpu, machine.cores, machine.memory_gib, machine.rustc, machine.os
    );
    println!(
        "- one thread; each layer a stage of its own on micro-batches of {m} training images; {rounds} rounds at fresh parameters of {batches} micro-batches, the first of each left out (checksum {checksum:.6})\n"
    );
    let medians: Vec<(f64, f64)> = (0..layers)
        .map(|l| (median(&mut forward[l]), median(&mut backward[l])))
        .collect();
    let total: f64 = medians.iter().map(|(f, b)| f + b).sum();
    println!("| layer | parameters | forward ms/image | backward ms/image | share of the whole | bytes/image to the next stage |");
    println!("|---|---|---|---|---|---|");
    for (l, name) in LAYERS.iter().enumerate() {
        let (f, b) = medians[l];
        let params = net.layer_params(l..l + 1).len();
        let to_next = if l + 1 < layers {
            sent[l].to_string()
        } else {
            "— (the loss)".to_owned()
        };
        println!(
            "| {name} | {params} | {f:.4} | {b:.4} | {:.1} % | {to_next} |",
            100.0 * (f + b) / total
        );
    }
    println!(
        "| all | {} | | | {total:.4} ms/image | |",
        net.param_count()
    );
}
