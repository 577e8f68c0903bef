//! Unit compute and pacing: one unit's real gradient, cut into shard slices,
//! and the unit's end, after the injected slowdown (and, in paced mode, its
//! nominal duration) has run out.

use std::time::{Duration, Instant};

use super::epoch::{Epoch, NextUnit, Running};
use crate::data::LocalRows;
use crate::inject::Stretch;
use crate::run::context::JobContext;
use crate::run::messages::GradSlice;
use crate::trace::UnitRecord;
use crate::workload::{micro_batched_gradient, Draws};

/// Starts one unit: computes its real gradient, cuts it into shard slices and
/// sets when the unit is over — stretched by the injected slowdown (and to its
/// nominal duration in paced mode).
pub(super) fn start_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &Epoch,
    source: &LocalRows,
    next: NextUnit,
) -> Running {
    let unit = &next.unit.rows;
    let started = Instant::now();
    let start_us = cx.us_since_start(started);
    let gradient = micro_batched_gradient(
        cx.workload.as_ref(),
        Draws {
            seed: cx.plan.seed,
            iteration: next.unit.iteration,
        },
        source,
        &epoch.params,
        &unit.rows,
        cx.plan.micro_batch as usize,
    );
    let compute = started.elapsed();
    let base = match cx.plan.pace_ns_per_row {
        0 => compute,
        ns => Duration::from_nanos(ns * unit.rows.len() as u64),
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
        m => rows.div_ceil(m).max(1),
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
        span_us: deadline.saturating_duration_since(started).as_micros() as u64,
        started,
    }
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
        ..
    } = running;
    epoch.oversleep = if stretched {
        Instant::now().saturating_duration_since(deadline)
    } else {
        Duration::ZERO
    };
    let unit = &next.unit.rows;
    let rows = unit.rows.len() as u32;
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

/// Sleeps until `deadline`.
pub(super) fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}
