//! The checks that need the dataset: the partitions against its training
//! rows, and the micro-batch against the units those rows are cut into.

use std::collections::BTreeSet;

use crate::data::Dataset;
use crate::spec::{partitioning_for, JobPlan, SpecError};

/// Checks `plan` against the `dataset` it trains on: at least one training
/// row per partition, and a micro-batch that divides every unit. The error
/// points at the job file's line where it can.
pub fn check_against_data(plan: &JobPlan, dataset: &Dataset) -> Result<(), SpecError> {
    let invalid = |key: &str, message: String| SpecError::in_plan(plan, "data", key, message);
    let train = dataset.train.len();
    if train < plan.partitions as usize {
        return Err(invalid(
            "partitions",
            format!(
                "{} partitions but the dataset has only {train} training rows",
                plan.partitions
            ),
        ));
    }
    if let Some(column) = &plan.partition_by {
        check_groups(plan, dataset, column)?;
    }
    if let Some(layout) = &plan.parallel {
        check_pipeline_micro(plan, dataset, layout)?;
    }
    if plan.micro_batch == 0 {
        return Ok(());
    }
    let sizes = unit_sizes(plan, dataset);
    let m = plan.micro_batch as usize;
    let listed = || {
        sizes
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(&smallest) = sizes.first().filter(|&&s| m > s) {
        return Err(invalid(
            "micro_batch",
            format!(
                "{m} rows is larger than a unit: this job's units hold {} rows \
                 (the smallest {smallest}); choose a divisor of the unit size",
                listed()
            ),
        ));
    }
    if let Some(&size) = sizes.iter().find(|&&s| s % m != 0) {
        let divisors: Vec<String> = (1..=size)
            .filter(|d| sizes.iter().all(|s| s % d == 0))
            .map(|d| d.to_string())
            .collect();
        return Err(invalid(
            "micro_batch",
            format!(
                "{m} rows does not divide a unit of {size} rows (this job's units hold {} \
                 rows); sizes that divide every unit: {}",
                listed(),
                divisors.join(", ")
            ),
        ));
    }
    Ok(())
}

/// A pipeline's schedule against its replicas' micro-batches: `1f1b`
/// needs at least as many in each replica's iteration as there are stages.
fn check_pipeline_micro(
    plan: &JobPlan,
    dataset: &Dataset,
    layout: &crate::pipeline::StageLayout,
) -> Result<(), SpecError> {
    let partitioning = partitioning_for(plan, dataset);
    let n = plan.units_per_partition as usize;
    let micro_of = |size: usize| match plan.micro_batch as usize {
        0 => 1,
        m => size.div_ceil(m),
    };
    // a replica holds the partitions p ≡ r (mod R)
    let fewest = (0..layout.replicas)
        .map(|r| {
            (r..plan.partitions)
                .step_by(layout.replicas as usize)
                .map(|p| {
                    let sampled = partitioning.sample_size(partitioning.partition_rows(p).len());
                    (0..n)
                        .map(|u| micro_of(crate::data::partition::even_range(sampled, n, u).len()))
                        .sum::<usize>()
                })
                .sum::<usize>()
        })
        .min()
        .unwrap_or(0);
    if let Err(e) = layout.schedule.check(layout.stages, fewest as u32) {
        return Err(SpecError::in_plan(
            plan,
            "parallel",
            "schedule",
            format!(
                "{e}; a replica's iteration here has {fewest} (raise [data] \
                 units_per_partition or lower micro_batch)"
            ),
        ));
    }
    Ok(())
}

/// `[data] partition_by`: a categorical column of the data with at least as
/// many values among the training rows as there are partitions.
fn check_groups(plan: &JobPlan, dataset: &Dataset, column: &str) -> Result<(), SpecError> {
    let invalid = |message: String| SpecError::in_plan(plan, "data", "partition_by", message);
    let Some(groups) = dataset.train_groups(column) else {
        let mut columns: Vec<&str> = dataset
            .feature_names
            .iter()
            .filter_map(|f| f.split_once('=').map(|(c, _)| c))
            .collect();
        columns.dedup();
        return Err(invalid(format!(
            "the data has no categorical column '{column}' (categorical columns: {})",
            match columns.is_empty() {
                true => "none".to_owned(),
                false => columns.join(", "),
            }
        )));
    };
    let values: BTreeSet<u32> = groups.into_iter().collect();
    if values.len() < plan.partitions as usize {
        return Err(invalid(format!(
            "'{column}' takes {} values among the training rows, fewer than the {} \
             partitions; every partition needs at least one",
            values.len(),
            plan.partitions
        )));
    }
    Ok(())
}

/// The row counts of the plan's units (the same in every iteration: each
/// partition samples a fixed number of rows and cuts them evenly).
pub fn unit_sizes(plan: &JobPlan, dataset: &Dataset) -> BTreeSet<usize> {
    let partitioning = partitioning_for(plan, dataset);
    (0..plan.partitions)
        .flat_map(|p| {
            let sampled = partitioning.sample_size(partitioning.partition_rows(p).len());
            let n = plan.units_per_partition as usize;
            (0..n).map(move |u| crate::data::partition::even_range(sampled, n, u).len())
        })
        .collect()
}
