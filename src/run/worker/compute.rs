//! Unit compute and pacing: one unit's real gradient, stretched by the injected
//! slowdown (and to its nominal duration in paced mode), cut into shard slices.

use std::time::{Duration, Instant};

use super::epoch::Epoch;
use crate::data::{LocalRows, UnitRows};
use crate::run::context::JobContext;
use crate::run::messages::GradSlice;
use crate::trace::{UnitAction, UnitRecord};

/// Computes one unit's real gradient, stretches it by the injected slowdown (and
/// to its nominal duration in paced mode), and cuts it into shard slices.
pub(super) fn compute_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &mut Epoch,
    source: &LocalRows,
    unit: &UnitRows,
    action: UnitAction,
    iteration: u64,
) -> (UnitRecord, Vec<GradSlice>) {
    let started = Instant::now();
    let start_us = cx.us_since_start(started);
    let gradient = cx.workload.unit_gradient(source, &epoch.params, &unit.rows);
    let compute = started.elapsed();
    let slowdown = cx.schedule.slowdown(worker, epoch.iteration, start_us);
    let base = match cx.plan.pace_ns_per_row {
        0 => compute,
        ns => Duration::from_nanos(ns * unit.rows.len() as u64),
    };
    let target = base.mul_f64(slowdown);
    // A sleep wakes up late by tens of µs; the next unit of the iteration
    // absorbs the previous overshoot, so it does not pile up over many units.
    let deadline = started + target.saturating_sub(epoch.oversleep).max(compute);
    epoch.oversleep = if target > compute {
        sleep_until(deadline)
    } else {
        Duration::ZERO
    };
    let rows = unit.rows.len() as u32;
    let slices: Vec<GradSlice> = cx
        .shards
        .iter()
        .enumerate()
        .map(|(owner, range)| GradSlice {
            owner: owner as u32,
            iteration,
            partition: unit.key.partition,
            unit: unit.key.unit,
            executor: worker,
            rows,
            loss_sum: if owner == 0 { gradient.loss_sum } else { 0.0 },
            values: gradient.grad[range.clone()].to_vec(),
            substitute: false,
        })
        .collect();
    let end_us = cx.now_us();
    let compute_us = compute.as_micros() as u64;
    let record = UnitRecord {
        iteration,
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
        action,
        gt_slowdown: slowdown,
        gt_delay_us: target.saturating_sub(base).as_micros() as u64,
    };
    epoch.last_end_us = end_us;
    epoch.compute_us += compute_us;
    epoch.rows += rows as u64;
    epoch.max_slowdown = epoch.max_slowdown.max(slowdown);
    epoch.delay_us += record.gt_delay_us;
    (record, slices)
}

/// Sleeps until `deadline` and returns by how much the sleep overshot it.
fn sleep_until(deadline: Instant) -> Duration {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
    Instant::now().saturating_duration_since(deadline)
}
