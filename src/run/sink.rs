//! The sink: one thread per process that receives records from the workers,
//! evaluates parameter versions on the test rows, assembles the per-iteration
//! rows, writes trace parts, and tells an observer about progress.
//!
//! It runs beside the dataflow, not in it, so writing Parquet and evaluating the
//! model never lengthen a worker's iteration.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use super::detect::LaggardReport;
use crate::trace::{IterationRecord, TraceError, TraceWriter, UnitRecord, WorkerRecord};
use crate::workload::{Evaluation, Workload};

/// What workers tell the sink.
#[derive(Debug)]
pub enum SinkEvent {
    /// A worker's unit rows for one iteration.
    Units(Vec<UnitRecord>),
    /// Every worker's row for one iteration, with the laggard report (worker 0).
    Iteration {
        /// The workers' rows.
        workers: Vec<WorkerRecord>,
        /// Who lagged.
        report: LaggardReport,
    },
    /// An iteration's mean training loss (owner of shard 0).
    TrainLoss {
        /// Iteration.
        iteration: u64,
        /// Mean log-loss over the iteration's rows.
        loss: f64,
    },
    /// Backup workers: the partitions iteration `iteration` dropped (shard 0's
    /// owner, when it decides).
    Dropped {
        /// Iteration.
        iteration: u64,
        /// Dropped partitions, ascending.
        partitions: Vec<u32>,
    },
    /// A complete parameter version (worker 0); version `iterations` is final.
    Params {
        /// Version.
        version: u64,
        /// All coordinates.
        values: Arc<Vec<f64>>,
    },
}

/// Receives each completed iteration row, in iteration order.
pub type Observer = Box<dyn FnMut(&IterationRecord) + Send>;

/// What the sink hands back when the run is over.
#[derive(Debug)]
pub struct SinkOutput {
    /// One row per iteration, in order.
    pub iterations: Vec<IterationRecord>,
    /// The final parameters, if the last version arrived.
    pub final_params: Option<Arc<Vec<f64>>>,
    /// Test quality of the final parameters.
    pub final_eval: Option<Evaluation>,
    /// Trace part files written.
    pub parts: Vec<PathBuf>,
    /// Σ over iterations of the estimated iteration time without the injected
    /// delays: max over workers of (finish − iteration start − injected delay).
    pub ideal_us: u64,
    /// Units computed, and of those computed by a peer of their owner.
    pub units_total: u64,
    /// Units computed by a peer of their owner.
    pub units_reassigned: u64,
    /// Speculative copies computed.
    pub units_cloned: u64,
}

#[derive(Debug, Default)]
struct Pending {
    timing: Option<(u64, LaggardReport)>,
    loss: Option<f64>,
    eval: Option<Evaluation>,
    dropped: Vec<u32>,
}

/// Settings of the sink.
pub struct SinkConfig {
    /// Training iterations; version `iterations` is the final model.
    pub iterations: u64,
    /// Evaluate on the test rows every this many iterations (and the last one).
    pub eval_every: u64,
    /// Iterations per trace part.
    pub part_iterations: u64,
    /// Rows sampled per iteration.
    pub rows_per_iteration: u64,
    /// Units per iteration.
    pub units_per_iteration: u32,
}

/// Runs the sink until every sender is gone.
pub fn run_sink(
    events: Receiver<SinkEvent>,
    mut writer: TraceWriter,
    workload: Arc<dyn Workload>,
    config: SinkConfig,
    mut observer: Option<Observer>,
) -> Result<SinkOutput, TraceError> {
    let mut out = SinkOutput {
        iterations: Vec::new(),
        final_params: None,
        final_eval: None,
        parts: Vec::new(),
        ideal_us: 0,
        units_total: 0,
        units_reassigned: 0,
        units_cloned: 0,
    };
    let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
    let mut units: Vec<UnitRecord> = Vec::new();
    let mut workers: Vec<WorkerRecord> = Vec::new();
    // out.iterations[written..] are the rows not yet in a part.
    let mut written = 0usize;
    let mut next_row = 0u64;
    let mut part_end = config.part_iterations;
    let wants_eval = |t: u64| t.is_multiple_of(config.eval_every) || t + 1 == config.iterations;

    for event in events {
        match event {
            SinkEvent::Units(mut batch) => {
                out.units_total += batch.len() as u64;
                out.units_reassigned += batch
                    .iter()
                    .filter(|u| u.action == crate::trace::UnitAction::Reassigned)
                    .count() as u64;
                out.units_cloned += batch
                    .iter()
                    .filter(|u| u.action == crate::trace::UnitAction::Clone)
                    .count() as u64;
                units.append(&mut batch);
            }
            SinkEvent::Iteration {
                workers: mut w,
                report,
            } => {
                let t = w.first().map_or(0, |r| r.iteration);
                let barrier_wait_us = w.iter().map(|r| r.barrier_wait_us).sum();
                out.ideal_us += w
                    .iter()
                    .map(|r| {
                        r.finish_us
                            .saturating_sub(report.start_us)
                            .saturating_sub(r.gt_delay_us)
                    })
                    .max()
                    .unwrap_or(0);
                workers.append(&mut w);
                pending.entry(t).or_default().timing = Some((barrier_wait_us, report));
            }
            SinkEvent::Dropped {
                iteration,
                partitions,
            } => {
                pending.entry(iteration).or_default().dropped = partitions;
            }
            SinkEvent::TrainLoss { iteration, loss } => {
                pending.entry(iteration).or_default().loss = Some(loss);
            }
            SinkEvent::Params { version, values } => {
                if version >= config.iterations {
                    out.final_eval = Some(workload.evaluate(&values));
                    out.final_params = Some(values);
                } else if wants_eval(version) {
                    pending.entry(version).or_default().eval = Some(workload.evaluate(&values));
                }
            }
        }
        // Assemble every row that is complete, in order.
        while let Some(p) = pending.get(&next_row) {
            let ready = p.timing.is_some()
                && p.loss.is_some()
                && (!wants_eval(next_row) || p.eval.is_some());
            if !ready {
                break;
            }
            let p = pending.remove(&next_row).unwrap_or_default();
            let Some((barrier_wait_us, report)) = p.timing else {
                break;
            };
            let row = IterationRecord {
                iteration: next_row,
                workload: workload.kind().to_owned(),
                start_us: report.start_us,
                end_us: report.end_us,
                wall_us: report.end_us.saturating_sub(report.start_us),
                train_loss: p.loss.unwrap_or(f64::NAN),
                test_loss: p.eval.as_ref().map(|e| e.log_loss),
                test_accuracy: p.eval.as_ref().map(|e| e.accuracy),
                test_metrics: p.eval.map(|e| e.metrics).unwrap_or_default(),
                laggard: report.laggard,
                lag_us: report.lag_us,
                median_busy_us: report.median_busy_us,
                barrier_wait_us,
                units: config.units_per_iteration,
                rows: config.rows_per_iteration,
                dropped_partitions: p
                    .dropped
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            };
            if let Some(observer) = observer.as_mut() {
                observer(&row);
            }
            out.iterations.push(row);
            next_row += 1;
            if next_row >= part_end {
                flush(
                    &mut writer,
                    &mut out,
                    &mut units,
                    &mut workers,
                    &mut written,
                    part_end,
                )?;
                part_end += config.part_iterations;
            }
        }
    }
    flush(
        &mut writer,
        &mut out,
        &mut units,
        &mut workers,
        &mut written,
        u64::MAX,
    )?;
    Ok(out)
}

/// Writes every buffered record of iterations before `end` as one part per table.
fn flush(
    writer: &mut TraceWriter,
    out: &mut SinkOutput,
    units: &mut Vec<UnitRecord>,
    workers: &mut Vec<WorkerRecord>,
    written: &mut usize,
    end: u64,
) -> Result<(), TraceError> {
    let (done, later): (Vec<_>, Vec<_>) = units.drain(..).partition(|u| u.iteration < end);
    *units = later;
    out.parts.extend(writer.write_units(&done)?);
    let (done, later): (Vec<_>, Vec<_>) = workers.drain(..).partition(|w| w.iteration < end);
    *workers = later;
    out.parts.extend(writer.write_workers(&done)?);
    let part = writer.write_iterations(&out.iterations[*written..])?;
    out.parts.extend(part);
    *written = out.iterations.len();
    Ok(())
}
