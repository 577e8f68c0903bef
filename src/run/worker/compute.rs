//! Unit compute and pacing: one unit's real gradient, cut into shard slices,
//! and the unit's end, after the injected slowdown (and, in paced mode, its
//! nominal duration) has run out.

use std::time::{Duration, Instant};

use super::epoch::{Epoch, NextUnit, Running};
use super::lazy::{Lazy, Work};
use crate::data::LocalRows;
use crate::inject::{StragglerSchedule, Stretch};
use crate::run::context::JobContext;
use crate::run::messages::{Carry, GradSlice, PieceSums};
use crate::trace::UnitRecord;
use crate::workload::{micro_batched_gradient, Draws, UnitGradient, Update};

/// Starts one unit: computes its real gradient, cuts it into shard slices and
/// sets when the unit is over — stretched by the injected slowdown (and to its
/// nominal duration in paced mode). A unit whose rest may be handed over
/// ([`PolicyPlan::rests_in_flight`](crate::policy::PolicyPlan::rests_in_flight))
/// computes only its first micro-batch now, the others as their time comes
/// ([`Lazy`]).
pub(super) fn start_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &Epoch,
    source: &LocalRows,
    mut next: NextUnit,
) -> Running {
    let carry = next.unit.carry.take().map(|c| *c);
    let unit = &next.unit.rows;
    let started = Instant::now();
    let start_us = cx.us_since_start(started);
    let micro = cx.plan.micro_batch as usize;
    let first_rows = carry.as_ref().map_or(0, |c| c.done_rows as usize);
    let rows_here = unit.rows.len().saturating_sub(first_rows);
    let micro_batches = match micro {
        0 => 1,
        m => rows_here.div_ceil(m).max(1) as u32,
    };
    let draws = Draws {
        seed: cx.plan.seed,
        iteration: next.unit.iteration,
    };
    let work: Work<'_> = (cx.workload.as_ref(), draws, source, epoch.params.as_slice());
    let policy = &cx.plan.policy;
    let in_parts = policy.rests_in_flight() || policy.tails_in_flight();
    let tail = next.unit.piece.filter(|p| p.first_row > 0);
    let mut tail_slices = Vec::new();
    let (gradient, lazy, compute, estimate) = if let Some(piece) = tail {
        // A peer's tail: each micro-batch from zero, sent as it is.
        let sums: Vec<UnitGradient> = (unit.rows.chunks(micro.max(1)))
            .map(|batch| cx.workload.unit_update(draws, source, &epoch.params, batch))
            .collect();
        tail_slices = slices_of(cx, worker, &next, Sums::Tail(piece, &sums));
        let compute = started.elapsed();
        (None, None, compute, compute)
    } else if in_parts && micro > 0 && micro_batches > 1 {
        let (lazy, first) = Lazy::begin(work, &unit.rows, micro, carry);
        (None, Some(lazy), first, first * micro_batches)
    } else {
        let gradient = match carry {
            // The rest of a peer's unit: its last micro-batch, from its sums.
            Some(carry) => {
                let (lazy, _) = Lazy::begin(work, &unit.rows, micro, Some(carry));
                lazy.finish(work, &unit.rows).0
            }
            None => micro_batched_gradient(
                cx.workload.as_ref(),
                draws,
                source,
                &epoch.params,
                &unit.rows,
                micro,
            ),
        };
        let compute = started.elapsed();
        (Some(gradient), None, compute, compute)
    };
    let base = match cx.plan.pace_ns_per_row {
        0 => estimate,
        ns => Duration::from_nanos(ns * rows_here as u64),
    };
    // The slowdowns the unit meets while it runs (a disrupted window may
    // open or end part-way through it).
    let Stretch {
        span: target,
        slowdown,
    } = cx.schedule.stretch(worker, epoch.iteration, start_us, base);
    let slices = match gradient {
        Some(g) => slices_of(cx, worker, &next, Sums::Unit(g)),
        None => tail_slices,
    };
    // A slow link (`slow-link`) holds the gradient after its compute for as
    // long as its bytes take to leave.
    // (`disruptor = "tc"`: the host's interface is limited instead, by the
    // draw of its first worker)
    let link_mbps = cx
        .schedule
        .link_mbps(cx.host_worker(worker), next.unit.iteration);
    let send = cx
        .emulated_link(worker, next.unit.iteration)
        .map_or(Duration::ZERO, |mbps| link_time(cx, worker, &slices, mbps));
    // A timer fires late by tens of µs; the next unit of the iteration
    // absorbs the previous overshoot, so it does not pile up over many units.
    let deadline = started + target.saturating_sub(epoch.oversleep).max(compute) + send;
    Running {
        next,
        deadline,
        stretched: target > estimate || !send.is_zero(),
        send,
        link_mbps: link_mbps.unwrap_or(0.0),
        start_us,
        compute,
        slowdown,
        delay: target.saturating_sub(base),
        slices,
        micro_batches,
        rows_here: rows_here as u32,
        first_rows: first_rows as u32,
        lazy,
        span_us: deadline.saturating_duration_since(started).as_micros() as u64,
        started,
    }
}

/// How long `worker`'s gradient `slices` take through a link of `mbps`
/// Mbit/s: the bytes bound for shard owners on other hosts (the dense size,
/// when the gradient is computed as its time comes).
fn link_time(cx: &JobContext, worker: u32, slices: &[GradSlice], mbps: f64) -> Duration {
    let away = |owner: u32| !cx.same_host(owner, worker);
    let bytes: u64 = if slices.is_empty() {
        (cx.shards.iter().enumerate())
            .filter(|(owner, _)| away(*owner as u32))
            .map(|(_, range)| range.len() as u64 * 8 + 48)
            .sum()
    } else {
        (slices.iter())
            .filter(|s| away(s.owner))
            .map(GradSlice::wire_bytes)
            .sum()
    };
    StragglerSchedule::over_link(bytes, mbps)
}

/// What a worker computed of a unit, to cut into slices.
enum Sums<'a> {
    /// The sums of the unit's rows here (the whole unit, or the piece its
    /// worker kept), cut where they lie.
    Unit(UnitGradient),
    /// A peer's tail: each micro-batch's sums.
    Tail(crate::run::messages::Piece, &'a [UnitGradient]),
}

/// `sums`, of `next`'s unit computed by `worker`, cut into the shard
/// owners' slices.
fn slices_of(cx: &JobContext, worker: u32, next: &NextUnit, sums: Sums<'_>) -> Vec<GradSlice> {
    let unit = &next.unit.rows;
    let loss = |owner: usize, loss_sum: f64| if owner == 0 { loss_sum } else { 0.0 };
    // Each shard's (loss, update, piece).
    let parts: Vec<(f64, Update, Option<PieceSums>)> = match sums {
        Sums::Unit(g) => {
            let piece = next.unit.piece;
            // (cut where they lie: the first shard's part keeps the buffer)
            g.grad
                .split(&cx.shards)
                .into_iter()
                .enumerate()
                .map(|(owner, update)| {
                    let piece = piece.map(|piece| PieceSums {
                        piece,
                        micro: Vec::new(),
                    });
                    (loss(owner, g.loss_sum), update, piece)
                })
                .collect()
        }
        Sums::Tail(piece, micro) => (cx.shards.iter().enumerate())
            .map(|(owner, range)| {
                let micro = (micro.iter())
                    .map(|g| (g.grad.slice(range.clone()), loss(owner, g.loss_sum)))
                    .collect();
                (0.0, Update::zero(), Some(PieceSums { piece, micro }))
            })
            .collect(),
    };
    (parts.into_iter().enumerate())
        .map(|(owner, (loss_sum, update, piece))| GradSlice {
            owner: owner as u32,
            iteration: next.unit.iteration,
            partition: unit.key.partition,
            unit: unit.key.unit,
            executor: worker,
            rows: unit.rows.len() as u32,
            loss_sum,
            update,
            substitute: false,
            stop_at: cx.stop.at(),
            sent_us: 0,
            span: None,
            piece,
        })
        .collect()
}

/// Ends the micro-batches of the unit in flight that have ended by `now_us`
/// (its micro-batches end evenly spaced until its deadline), each next one
/// computed as the one before ends. Nothing for a unit computed at once.
pub(super) fn advance(
    cx: &JobContext,
    params: &[f64],
    source: &LocalRows,
    running: &mut Running,
    now_us: u64,
) {
    let due = running.in_flight(now_us).done;
    let Some(lazy) = running.lazy.as_mut() else {
        return;
    };
    let draws = Draws {
        seed: cx.plan.seed,
        iteration: running.next.unit.iteration,
    };
    let work: Work<'_> = (cx.workload.as_ref(), draws, source, params);
    running.compute += lazy.advance(work, &running.next.unit.rows.rows, due);
}

/// Ends a unit at its deadline or later: its record and its slices (a unit
/// computed as its time comes ends its last micro-batches first).
pub(super) fn finish_unit(
    cx: &JobContext,
    (worker, params, source): (u32, &[f64], &LocalRows),
    epoch: &mut Epoch,
    running: Running,
) -> (NextUnit, UnitRecord, Vec<GradSlice>) {
    let Running {
        next,
        deadline,
        stretched,
        start_us,
        mut compute,
        slowdown,
        delay,
        mut slices,
        rows_here,
        micro_batches,
        lazy,
        send,
        link_mbps,
        ..
    } = running;
    if let Some(lazy) = lazy {
        let draws = Draws {
            seed: cx.plan.seed,
            iteration: next.unit.iteration,
        };
        let work: Work<'_> = (cx.workload.as_ref(), draws, source, params);
        let (gradient, spent) = lazy.finish(work, &next.unit.rows.rows);
        compute += spent;
        slices = slices_of(cx, worker, &next, Sums::Unit(gradient));
    }
    epoch.oversleep = if stretched {
        Instant::now().saturating_duration_since(deadline)
    } else {
        Duration::ZERO
    };
    let end_us = cx.now_us();
    let part = Part {
        start_us,
        end_us,
        compute_us: compute.as_micros() as u64,
        rows: rows_here,
        bytes_sent: slices.iter().map(GradSlice::wire_bytes).sum(),
        action: next.unit.action,
        slowdown,
        delay_us: delay.as_micros() as u64,
        micro_batches,
        send_us: send.as_micros() as u64,
        link_mbps,
    };
    let record = record_part(cx, worker, epoch, &next, part);
    epoch.last_unit_us = end_us.saturating_sub(start_us);
    (next, record, slices)
}

/// Stops the unit in flight after the micro-batches that ended here,
/// whose rest goes to a peer: the record of those micro-batches (`Split`)
/// and their running sums. What the micro-batch in flight took is wasted.
pub(super) fn split_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &mut Epoch,
    running: Running,
) -> (NextUnit, UnitRecord, Carry) {
    let Running {
        next,
        start_us,
        compute,
        slowdown,
        lazy,
        first_rows,
        ..
    } = running;
    let lazy = lazy.expect("only a unit computed as its time comes is split");
    let done = lazy.folded();
    let (carry, lost) = lazy.stop();
    let end_us = cx.now_us();
    let compute_us = compute.saturating_sub(lost).as_micros() as u64;
    epoch.wasted_us += lost.as_micros() as u64;
    let part = Part {
        start_us,
        end_us,
        compute_us,
        rows: carry.done_rows - first_rows,
        bytes_sent: 0,
        action: crate::trace::UnitAction::Split,
        slowdown,
        delay_us: end_us.saturating_sub(start_us).saturating_sub(compute_us),
        micro_batches: done,
        send_us: 0,
        link_mbps: 0.0,
    };
    let record = record_part(cx, worker, epoch, &next, part);
    epoch.oversleep = Duration::ZERO;
    (next, record, carry)
}

/// What a worker computed of a unit, for its record.
struct Part {
    start_us: u64,
    end_us: u64,
    compute_us: u64,
    rows: u32,
    bytes_sent: u64,
    action: crate::trace::UnitAction,
    slowdown: f64,
    delay_us: u64,
    micro_batches: u32,
    send_us: u64,
    link_mbps: f64,
}

/// The record of `part` of `next`'s unit, computed by `worker`, added to
/// what `epoch` sums of its units.
fn record_part(
    cx: &JobContext,
    worker: u32,
    epoch: &mut Epoch,
    next: &NextUnit,
    part: Part,
) -> UnitRecord {
    let unit = &next.unit.rows;
    let record = UnitRecord {
        iteration: next.unit.iteration,
        worker,
        process: cx.process_of(worker),
        partition: unit.key.partition,
        unit: unit.key.unit,
        owner: cx.owners[unit.key.partition as usize],
        executor: worker,
        start_us: part.start_us,
        end_us: part.end_us,
        compute_us: part.compute_us,
        wait_us: part.start_us.saturating_sub(epoch.last_end_us),
        rows: part.rows,
        bytes_sent: part.bytes_sent,
        action: part.action,
        gt_slowdown: part.slowdown,
        gt_delay_us: part.delay_us,
        micro_batches: part.micro_batches,
        send_us: part.send_us,
        gt_link_mbps: part.link_mbps,
    };
    epoch.first_start_us.get_or_insert(part.start_us);
    epoch.last_end_us = part.end_us;
    epoch.compute_us += part.compute_us;
    epoch.rows += u64::from(part.rows);
    epoch.max_slowdown = epoch.max_slowdown.max(part.slowdown);
    epoch.delay_us += part.delay_us;
    record
}

/// Sleeps until `deadline`.
pub(super) fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}
