//! The checks a pipeline's jobs need their data for, all made before the
//! first job runs, so that a bad job in the last sweep writes nothing: the
//! partitions and micro-batch against the dataset, and a paced job's pace
//! against the compute it stands for.

use std::collections::HashMap;
use std::sync::Arc;

use super::spec::RunSpec;
use super::{workload_for, BenchError};
use crate::run::pace::{measure, MeasuredPace};
use crate::spec::{check_against_data, JobPlan, SpecError};
use crate::workload::Workload;

/// Checks every planned run against its data and its pace; loads each
/// dataset once and measures each cut of it once. Returns a note for each
/// sweep whose pace is shorter than its workers' compute sharing the cores
/// (allowed, but its units will overrun).
// The error type is the bench's, whose run errors travel unboxed.
#[allow(clippy::result_large_err)]
pub fn check_runs(runs: &[(RunSpec, JobPlan)]) -> Result<Vec<String>, BenchError> {
    let mut notes = Vec::new();
    let mut workloads: HashMap<String, Arc<dyn Workload>> = HashMap::new();
    let mut measured: HashMap<String, MeasuredPace> = HashMap::new();
    for (run, plan) in runs {
        let job_err = |source: SpecError| BenchError::Job {
            sweep: run.sweep.clone(),
            source: Box::new(source),
        };
        let workload = workload_for(&mut workloads, run, plan)?;
        check_against_data(plan, workload.data()).map_err(job_err)?;
        if plan.pace_ns_per_row == 0 {
            continue;
        }
        let cut = format!(
            "{:?} {:?} {} {} {} {} {} {}",
            plan.data,
            plan.model,
            plan.partitions,
            plan.units_per_partition,
            plan.batch_fraction,
            plan.micro_batch,
            plan.seed,
            plan.workers
        );
        let m = *measured
            .entry(cut)
            .or_insert_with(|| measure(plan, workload.as_ref()));
        if let Some(refused) = crate::run::pace::refusal(plan, &m) {
            return Err(job_err(refused));
        }
        if let Some(note) = crate::run::pace::shortfall(plan.workers, plan.pace_ns_per_row, &m) {
            let note = format!("sweep {}: {note}", run.sweep);
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    Ok(notes)
}
