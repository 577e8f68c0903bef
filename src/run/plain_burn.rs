//! The peer check: the same CNN job trained by a plain burn loop — burn's own
//! Adam, no timely, no shards — over the same units in the same order, so its
//! loss curve and time can be set against a `forestall run` at W = 1.

use std::time::Instant;

use crate::data::DataError;
use crate::spec::{partitioning_for, JobPlan, ModelPlan};
use crate::workload::cnn::peer::train_plain_burn;
use crate::workload::cnn::CnnClassifier;
use crate::workload::{Evaluation, Workload};

/// What the plain burn loop produced.
#[derive(Debug, Clone)]
pub struct BurnReference {
    /// Mean training loss of each iteration, at the parameters it started from.
    pub train_loss: Vec<f64>,
    /// Wall time of each iteration, µs.
    pub iteration_us: Vec<u64>,
    /// Final parameters.
    pub params: Vec<f64>,
    /// Test quality of the final parameters.
    pub eval: Evaluation,
    /// Time to load the images and build the batches, µs.
    pub load_us: u64,
}

/// Trains `plan` (a `cnn` job) in a plain burn loop: iteration t is one Adam
/// step on the units of every partition in partition order, as the dataflow
/// reduces them.
pub fn burn_reference(plan: &JobPlan) -> Result<BurnReference, DataError> {
    let ModelPlan::Cnn {
        class_weighting, ..
    } = plan.model
    else {
        return Err(DataError::Unfit {
            path: plan.data.path.clone(),
            kind: plan.model.kind(),
            problem: "the plain burn reference trains the cnn only".into(),
        });
    };
    let loading = Instant::now();
    let cnn = CnnClassifier::load_config(&plan.data, class_weighting)?;
    let data = cnn.data();
    let partitioning = partitioning_for(plan, data);
    // Every training image once, densified, indexed by its row.
    let rows: Vec<u32> = (0..data.rows.rows() as u32).collect();
    let (pixels, labels, weights) = cnn.batch(&data.source(), &rows);
    let steps: Vec<Vec<Vec<u32>>> = (0..plan.iterations)
        .map(|t| {
            (0..plan.partitions)
                .flat_map(|p| partitioning.units(t, p))
                .flat_map(|u| match plan.micro_batch {
                    0 => vec![u.rows],
                    m => u.rows.chunks(m as usize).map(<[u32]>::to_vec).collect(),
                })
                .collect()
        })
        .collect();
    let load_us = loading.elapsed().as_micros() as u64;
    let init = cnn.init_params(plan.seed);
    let run = train_plain_burn(
        cnn.net(),
        &init,
        &pixels,
        &labels,
        &weights,
        &steps,
        plan.optimizer.learning_rate,
    );
    let eval = cnn.evaluate(&run.params);
    Ok(BurnReference {
        train_loss: run.losses,
        iteration_us: run.step_us,
        params: run.params,
        eval,
        load_us,
    })
}
