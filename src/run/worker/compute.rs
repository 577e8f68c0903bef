//! Unit compute and pacing: one unit's real gradient, cut into shard slices,
//! and the unit's end, after the injected slowdown (and, in paced mode, its
//! nominal duration) has run out.

use std::time::{Duration, Instant};

use super::epoch::{Epoch, NextUnit, Running};
use crate::data::LocalRows;
use crate::data::RowSource;
use crate::inject::Stretch;
use crate::run::context::JobContext;
use crate::run::messages::{Carry, GradSlice};
use crate::trace::UnitRecord;
use crate::workload::{micro_batched_gradient, Draws, MicroBatches, UnitGradient, Workload};

/// Starts one unit: computes its real gradient, cuts it into shard slices and
/// sets when the unit is over — stretched by the injected slowdown (and to its
/// nominal duration in paced mode).
pub(super) fn start_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &Epoch,
    source: &LocalRows,
    mut next: NextUnit,
) -> Running {
    let carry = next.unit.carry.take();
    let unit = &next.unit.rows;
    let started = Instant::now();
    let start_us = cx.us_since_start(started);
    let micro = cx.plan.micro_batch as usize;
    let first_rows = carry.as_ref().map_or(0, |c| c.done_rows as usize);
    let rows_here = unit.rows.len().saturating_sub(first_rows);
    // Its rest may be handed over between micro-batches: keep the sums.
    let keep = cx.plan.policy.rests_in_flight() && micro > 0 && rows_here > micro;
    let draws = Draws {
        seed: cx.plan.seed,
        iteration: next.unit.iteration,
    };
    let (gradient, snapshots) = if carry.is_none() && !keep {
        let gradient = micro_batched_gradient(
            cx.workload.as_ref(),
            draws,
            source,
            &epoch.params,
            &unit.rows,
            micro,
        );
        (gradient, Vec::new())
    } else {
        let source: &dyn RowSource = source;
        let work = (cx.workload.as_ref(), draws, source, epoch.params.as_slice());
        fold_from(work, &unit.rows, micro, carry.map(|c| *c), keep)
    };
    let compute = started.elapsed();
    let base = match cx.plan.pace_ns_per_row {
        0 => compute,
        ns => Duration::from_nanos(ns * rows_here as u64),
    };
    // The slowdowns the unit meets while it runs (a disrupted window may
    // open or end part-way through it).
    let Stretch {
        span: target,
        slowdown,
    } = cx.schedule.stretch(worker, epoch.iteration, start_us, base);
    // A timer fires late by tens of µs; the next unit of the iteration
    // absorbs the previous overshoot, so it does not pile up over many units.
    let deadline = started + target.saturating_sub(epoch.oversleep).max(compute);
    let rows = unit.rows.len() as u32;
    let micro_batches = match cx.plan.micro_batch {
        0 => 1,
        m => (rows_here as u32).div_ceil(m).max(1),
    };
    let slices: Vec<GradSlice> = cx
        .shards
        .iter()
        .enumerate()
        .map(|(owner, range)| GradSlice {
            owner: owner as u32,
            iteration: next.unit.iteration,
            partition: unit.key.partition,
            unit: unit.key.unit,
            executor: worker,
            rows,
            loss_sum: if owner == 0 { gradient.loss_sum } else { 0.0 },
            update: gradient.grad.slice(range.clone()),
            substitute: false,
        })
        .collect();
    Running {
        next,
        deadline,
        stretched: target > compute,
        start_us,
        compute,
        slowdown,
        delay: target.saturating_sub(base),
        slices,
        micro_batches,
        rows_here: rows_here as u32,
        first_rows: first_rows as u32,
        snapshots,
        span_us: deadline.saturating_duration_since(started).as_micros() as u64,
        started,
    }
}

/// A unit's sums folded micro-batch by micro-batch over `rows`, from the
/// running sums `carry` of its first rows when a peer handed over its rest
/// (from zero otherwise), and — when `keep` — the sums at the end of each
/// micro-batch but the last.
fn fold_from(
    (workload, draws, source, params): (&dyn Workload, Draws, &dyn RowSource, &[f64]),
    rows: &[u32],
    micro: usize,
    carry: Option<Carry>,
    keep: bool,
) -> (UnitGradient, Vec<Carry>) {
    let mut fold = MicroBatches::new(workload.param_count(), micro);
    if let Some(c) = carry {
        fold.done = c.done_rows as usize;
        fold.sums = UnitGradient {
            grad: c.grad,
            loss_sum: c.loss_sum,
        };
    }
    let mut snapshots = Vec::new();
    while fold.step(workload, draws, source, params, rows) > 0 {
        if keep && !fold.is_done(rows) {
            snapshots.push(Carry {
                done_rows: fold.done as u32,
                grad: fold.sums.grad.clone(),
                loss_sum: fold.sums.loss_sum,
            });
        }
    }
    (fold.sums, snapshots)
}

/// Ends a unit at its deadline or later: its record and its slices.
pub(super) fn finish_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &mut Epoch,
    running: Running,
) -> (NextUnit, UnitRecord, Vec<GradSlice>) {
    let Running {
        next,
        deadline,
        stretched,
        start_us,
        compute,
        slowdown,
        delay,
        slices,
        rows_here,
        micro_batches,
        ..
    } = running;
    epoch.oversleep = if stretched {
        Instant::now().saturating_duration_since(deadline)
    } else {
        Duration::ZERO
    };
    let unit = &next.unit.rows;
    let rows = rows_here;
    let end_us = cx.now_us();
    let compute_us = compute.as_micros() as u64;
    let record = UnitRecord {
        iteration: next.unit.iteration,
        worker,
        process: cx.process_of(worker),
        partition: unit.key.partition,
        unit: unit.key.unit,
        owner: cx.owners[unit.key.partition as usize],
        executor: worker,
        start_us,
        end_us,
        compute_us,
        wait_us: start_us.saturating_sub(epoch.last_end_us),
        rows,
        bytes_sent: slices.iter().map(GradSlice::wire_bytes).sum(),
        action: next.unit.action,
        gt_slowdown: slowdown,
        gt_delay_us: delay.as_micros() as u64,
        micro_batches,
    };
    epoch.first_start_us.get_or_insert(start_us);
    epoch.last_end_us = end_us;
    epoch.last_unit_us = end_us.saturating_sub(start_us);
    epoch.compute_us += compute_us;
    epoch.rows += rows as u64;
    epoch.max_slowdown = epoch.max_slowdown.max(slowdown);
    epoch.delay_us += record.gt_delay_us;
    (next, record, slices)
}

/// Stops the unit in flight after its first `done` micro-batches here,
/// whose rest goes to a peer: the record of those micro-batches (`Split`)
/// and their running sums. The compute of the micro-batches after them is
/// wasted.
pub(super) fn split_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &mut Epoch,
    running: Running,
    done: u32,
) -> (NextUnit, UnitRecord, Carry) {
    let Running {
        next,
        start_us,
        compute,
        slowdown,
        micro_batches,
        snapshots,
        first_rows,
        ..
    } = running;
    let carry = snapshots
        .into_iter()
        .nth(done as usize - 1)
        .expect("a split unit ends a micro-batch before its last");
    let rows = carry.done_rows - first_rows;
    let end_us = cx.now_us();
    let kept = compute.mul_f64(f64::from(done) / f64::from(micro_batches.max(1)));
    let compute_us = kept.as_micros() as u64;
    epoch.wasted_us += compute.saturating_sub(kept).as_micros() as u64;
    let unit = &next.unit.rows;
    let record = UnitRecord {
        iteration: next.unit.iteration,
        worker,
        process: cx.process_of(worker),
        partition: unit.key.partition,
        unit: unit.key.unit,
        owner: cx.owners[unit.key.partition as usize],
        executor: worker,
        start_us,
        end_us,
        compute_us,
        wait_us: start_us.saturating_sub(epoch.last_end_us),
        rows,
        bytes_sent: 0,
        action: crate::trace::UnitAction::Split,
        gt_slowdown: slowdown,
        gt_delay_us: end_us.saturating_sub(start_us).saturating_sub(compute_us),
        micro_batches: done,
    };
    epoch.first_start_us.get_or_insert(start_us);
    epoch.last_end_us = end_us;
    epoch.compute_us += compute_us;
    epoch.rows += u64::from(rows);
    epoch.max_slowdown = epoch.max_slowdown.max(slowdown);
    epoch.delay_us += record.gt_delay_us;
    epoch.oversleep = Duration::ZERO;
    (next, record, carry)
}

/// Sleeps until `deadline`.
pub(super) fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}
