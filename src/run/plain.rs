//! The same training without timely: one thread, the same units, the same
//! reduction order, the same optimiser. It is the oracle for the dataflow (the
//! parameters must match bit for bit) and the yardstick of the framework-overhead
//! benchmark.

use std::time::Instant;

use crate::data::{DataRow, LocalRows};
use crate::spec::JobPlan;
use crate::workload::{micro_batched_gradient, Draws, Optimizer, Workload};

/// What the plain loop produced.
#[derive(Debug, Clone)]
pub struct PlainOutput {
    /// Final parameters.
    pub params: Vec<f64>,
    /// Wall time of each iteration, µs.
    pub iteration_us: Vec<u64>,
    /// Mean training loss of each iteration, at the parameters it started from.
    pub train_loss: Vec<f64>,
    /// Time to build the row store before the first iteration, µs.
    pub load_us: u64,
}

/// Trains `plan`'s `workload` in a plain loop (no injection, no pacing).
pub fn train_plain(plan: &JobPlan, workload: &dyn Workload) -> PlainOutput {
    let dataset = workload.data();
    let partitioning = crate::spec::partitioning_for(plan, dataset);
    let dims = workload.param_count();
    let rows = partitioning.rows_per_iteration() as f64;
    let mut params = workload.init_params(plan.seed);
    let mut adam = Optimizer::new(
        plan.optimizer,
        (0..dims).map(|j| workload.penalised(j)).collect(),
    );
    let mut iteration_us = Vec::with_capacity(plan.iterations as usize);
    let mut train_loss = Vec::with_capacity(plan.iterations as usize);
    // The rows laid out as a worker's store holds them (partition by partition,
    // ascending rows), so the overhead benchmark compares like with like.
    let loading = Instant::now();
    let source = dataset.source();
    let mut store = LocalRows::with_capacity_for(dataset.rows.rows());
    for p in 0..plan.partitions {
        let mut rows = partitioning.partition_rows(p).to_vec();
        rows.sort_unstable();
        for r in rows {
            store.insert(&DataRow::from_source(&source, r));
        }
    }
    let load_us = loading.elapsed().as_micros() as u64;
    for t in 0..plan.iterations {
        let started = Instant::now();
        let mut total = vec![0.0; dims];
        let mut loss = 0.0;
        for p in 0..plan.partitions {
            let mut partial = vec![0.0; dims];
            let mut partial_loss = 0.0;
            for unit in partitioning.units(t, p) {
                let g = micro_batched_gradient(
                    workload,
                    Draws {
                        seed: plan.seed,
                        iteration: t,
                    },
                    &store,
                    &params,
                    &unit.rows,
                    plan.micro_batch as usize,
                );
                g.grad.add_into(&mut partial);
                partial_loss += g.loss_sum;
            }
            for (acc, x) in total.iter_mut().zip(&partial) {
                *acc += x;
            }
            loss += partial_loss;
        }
        adam.step(&mut params, &total, rows);
        train_loss.push(loss / rows);
        iteration_us.push(started.elapsed().as_micros() as u64);
    }
    PlainOutput {
        params,
        iteration_us,
        train_loss,
        load_us,
    }
}
