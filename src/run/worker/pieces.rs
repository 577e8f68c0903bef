//! Parts of units handed over: the rest or the tail of the unit in flight,
//! answering a peer's offer of help, and the broker's cuts of the own list
//! (whole units, then the tail of the next, then the unit in flight's).

use super::compute::{advance, split_unit};
use super::epoch::{Epoch, Given, Running};
use super::Emit;
use crate::data::DataRow;
use crate::policy::handover;
use crate::policy::{ControlKind, PeerAgent};
use crate::run::context::JobContext;
use crate::run::holdings::Holdings;
use crate::run::messages::{Control, Piece};
use crate::trace::UnitAction;

/// The unit in flight, if part of it may be handed over at `now_us`: it is
/// computed micro-batch by micro-batch (those ended by now are folded in),
/// it is of the current iteration, not a copy and not copied to a peer, and
/// no micro-batch ended since its worker last looked. With how its worker
/// sees it then.
fn may_hand_over<'e>(
    cx: &JobContext,
    epoch: &'e mut Epoch,
    holdings: &Holdings,
    now_us: u64,
) -> Option<(&'e super::epoch::Running, handover::InFlight)> {
    let running = epoch.running.as_mut().filter(|r| r.lazy.is_some())?;
    let payload = running.next.unit.payload.clone();
    let source = payload.as_deref().unwrap_or(holdings.store());
    advance(cx, &epoch.params, source, running, now_us);
    let running = epoch.running.as_ref()?;
    let flight = running.in_flight(now_us);
    let unit = &running.next.unit;
    let open = unit.action != UnitAction::Clone
        && unit.iteration == epoch.iteration
        && !epoch.cloned_out.contains_key(&unit.rows.key)
        && (running.lazy.as_ref()).is_some_and(|l| l.folded() == flight.done);
    open.then_some((running, flight))
}

/// Answers an offer of help from `helper` = (peer, its µs per unit) with
/// the rest of the unit in flight — own or handed over, never a copy, and
/// not copied to a peer — when [`handover::rest_in_flight`] says so: the
/// micro-batches not yet ended go with the running sums of those that did,
/// and with the unit's rows unless the helper holds them. The unit stops
/// here; its part is recorded as `Split`, and the rest's record on the
/// helper counts the unit. Returns whether the rest went.
pub(super) fn rest_running(
    (cx, worker, holdings): (&JobContext, u32, &Holdings),
    epoch: &mut Epoch,
    (agent, sends): (&mut PeerAgent, &mut Vec<(u32, ControlKind)>),
    (to, helper_unit_us): (u32, u64),
    now_us: u64,
    emit: &mut Emit<'_>,
) -> bool {
    let Some((running, flight)) = may_hand_over(cx, epoch, holdings, now_us) else {
        return false;
    };
    let unit = &running.next.unit;
    let eligible = unit.piece.is_none() && handover::rest_in_flight(&flight, helper_unit_us);
    if !eligible {
        return false;
    }
    let rows = rows_for(holdings, to, unit);
    let running = epoch.running.take().expect("checked above");
    let (next, record, carry) = split_unit(cx, worker, epoch, running);
    let message = Control {
        to,
        from: worker,
        iteration: epoch.iteration,
        kind: ControlKind::Rest {
            done: carry.done_rows.div_ceil(cx.plan.micro_batch.max(1)),
        },
        units: vec![next.unit.rows.key],
        rows,
        carry: Some(Box::new(carry)),
    };
    epoch.control.count(&message);
    (emit.control)(&epoch.caps.control, message);
    epoch.units_given += 1;
    epoch.units.push(record);
    epoch.waiting_helpers.clear();
    if next.counts_as_own {
        // Out of its hands: for its progress, an own unit done.
        epoch.observe(agent, cx.now_us());
        sends.extend(agent.on_own_unit_done(epoch.unit_us()));
    }
    true
}

/// Answers an offer of help from `helper` = (peer, its µs per unit) with
/// the last micro-batches of the unit in flight not yet begun — own or
/// handed over, never a copy, a rest or a tail, and not copied to a peer —
/// as many as [`handover::tail_in_flight`] says: the worker goes on with
/// the others, and its piece ends sooner (its deadline moves in by the
/// micro-batches handed over); the helper computes the tail, each
/// micro-batch from zero. The tail goes with its rows unless the helper
/// holds them. Returns whether a tail went.
pub(super) fn tail_running(
    (cx, worker, holdings): (&JobContext, u32, &Holdings),
    epoch: &mut Epoch,
    (to, helper_unit_us): (u32, u64),
    now_us: u64,
    emit: &mut Emit<'_>,
) -> bool {
    let unit_us = epoch.unit_us();
    let rests = cx.plan.policy.rests_in_flight();
    let pick = |running: &Running, flight: &handover::InFlight| {
        // (the rest instead, when it would end sooner on the helper)
        let rest = rests
            && running.next.unit.piece.is_none()
            && handover::rest_in_flight(flight, helper_unit_us);
        handover::tail_in_flight(flight, unit_us, helper_unit_us, rest)
    };
    hand_tail((cx, worker, holdings), epoch, to, pick, now_us, emit)
}

/// Hands `to` the last `count` micro-batches not yet begun of the unit in
/// flight, or as many as it has (at the broker's order, what a `Cut` left
/// after the own list), as [`tail_running`] does. Returns whether a tail
/// went.
pub(super) fn tail_running_ordered(
    (cx, worker, holdings): (&JobContext, u32, &Holdings),
    epoch: &mut Epoch,
    (to, count): (u32, u32),
    now_us: u64,
    emit: &mut Emit<'_>,
) -> bool {
    let pick = |_: &Running, flight: &handover::InFlight| {
        count.min(flight.total.saturating_sub(flight.done + 1))
    };
    hand_tail((cx, worker, holdings), epoch, to, pick, now_us, emit)
}

/// The tail of the unit in flight that `pick` counts (0: none), handed to
/// `to` (see [`tail_running`]).
fn hand_tail(
    (cx, worker, holdings): (&JobContext, u32, &Holdings),
    epoch: &mut Epoch,
    to: u32,
    pick: impl FnOnce(&Running, &handover::InFlight) -> u32,
    now_us: u64,
    emit: &mut Emit<'_>,
) -> bool {
    if !cx.plan.policy.tails_in_flight() {
        return false;
    }
    let Some((running, flight)) = may_hand_over(cx, epoch, holdings, now_us) else {
        return false;
    };
    let unit = &running.next.unit;
    let eligible = running.first_rows == 0 && unit.piece.is_none_or(|p| p.first_row == 0);
    let count = match eligible {
        true => pick(running, &flight),
        false => 0,
    };
    if count == 0 {
        return false;
    }
    let (total, keep) = (flight.total, flight.total - count);
    let keep_rows = (keep * cx.plan.micro_batch) as usize;
    let unit_rows = unit
        .piece
        .map_or(unit.rows.rows.len() as u32, |p| p.unit_rows);
    let tail = unit.rows.rows[keep_rows..].to_vec();
    let rows = rows_of(holdings, to, unit, &tail);
    let key = unit.rows.key;
    // The piece kept here: its first micro-batches, ending sooner.
    let scale = |d: std::time::Duration| d.mul_f64(f64::from(keep) / f64::from(total));
    let Some(running) = epoch.running.as_mut() else {
        return false;
    };
    running.next.unit.rows.rows.truncate(keep_rows);
    running.next.unit.piece = Some(Piece {
        first_row: 0,
        unit_rows,
    });
    running.deadline = running.started + scale(running.deadline - running.started);
    running.delay = scale(running.delay);
    running.span_us = running.span_us * u64::from(keep) / u64::from(total);
    running.micro_batches = keep;
    running.rows_here = keep_rows as u32;
    let message = Control {
        to,
        from: worker,
        iteration: epoch.iteration,
        kind: ControlKind::Tail { first: keep, count },
        units: vec![key],
        rows,
        carry: None,
    };
    epoch.control.count(&message);
    (emit.control)(&epoch.caps.control, message);
    epoch.units_given += 1;
    epoch.waiting_helpers.clear();
    true
}

/// Carries out the broker's `Cut { count }` to `to` (see
/// [`handover::cut`]): the last `count` micro-batches of the own list go,
/// from its end. A unit that goes whole goes as an assignment (the first
/// part of one cut before as a `Tail` from its first micro-batch), and its
/// agent hears of it at its next call; the unit where the count ends is
/// cut in two: its first rows stay in the list as a piece of it (in
/// `epoch.cut`), the rest go as a `Tail`. The shard owners fold the pieces
/// in row order, so the unit's bits do not change. Each part goes with its
/// rows unless the peer is a settled holder of them.
pub(super) fn cut_own(
    (cx, worker, holdings): (&JobContext, u32, &Holdings),
    epoch: &mut Epoch,
    (to, count): (u32, u32),
    emit: &mut Emit<'_>,
) {
    let micro = cx.plan.micro_batch as usize;
    if micro == 0 {
        return;
    }
    let held = epoch.own.iter().rev().map(|u| {
        let copied = epoch.cloned_out.contains_key(&u.key);
        (!copied).then(|| u.rows.len().div_ceil(micro) as u32)
    });
    let steps = handover::cut(held.collect::<Vec<_>>(), count);
    let listed: u32 = steps.iter().map(handover::CutStep::micro_batches).sum();
    for step in steps {
        let Some(key) = epoch.own.back().map(|u| u.key) else {
            break;
        };
        let cut_before = epoch.cut.iter().position(|c| c.0 == key);
        let (kind, ids) = match step {
            handover::CutStep::Whole { micro_batches } => {
                let Some(unit) = epoch.own.pop_back() else {
                    break;
                };
                epoch.handed_whole.push(to);
                let kind = match cut_before {
                    Some(i) => {
                        epoch.cut.swap_remove(i);
                        ControlKind::Tail {
                            first: 0,
                            count: micro_batches,
                        }
                    }
                    None => ControlKind::Assign { count: 1 },
                };
                (kind, unit.rows)
            }
            handover::CutStep::Tail { first, count } => {
                let Some(unit) = epoch.own.back_mut() else {
                    break;
                };
                let keep = (first as usize * micro).min(unit.rows.len());
                let tail = unit.rows.split_off(keep);
                if cut_before.is_none() {
                    let unit_rows = (keep + tail.len()) as u32;
                    let piece = Piece {
                        first_row: 0,
                        unit_rows,
                    };
                    epoch.cut.push((key, piece));
                }
                (ControlKind::Tail { first, count }, tail)
            }
        };
        let rows = match holdings.settled_holder(key.partition, to) {
            true => Vec::new(),
            false => holdings.ship(&ids),
        };
        let message = Control {
            to,
            from: worker,
            iteration: epoch.iteration,
            kind,
            units: vec![key],
            rows,
            carry: None,
        };
        epoch.units_given += 1;
        epoch.control.count(&message);
        (emit.control)(&epoch.caps.control, message);
    }
    // What the list does not hold comes from the unit in flight, as its tail.
    if count > listed {
        let owed = (to, count - listed);
        tail_running_ordered((cx, worker, holdings), epoch, owed, cx.now_us(), emit);
    }
}

/// The rows `unit` travels to `to` with: none when `to` holds its partition,
/// else from the rows that came with it, or from the store.
pub(super) fn rows_for(holdings: &Holdings, to: u32, unit: &Given) -> Vec<DataRow> {
    rows_of(holdings, to, unit, &unit.rows.rows)
}

/// Rows `ids` of `unit` as they travel to `to` (see [`rows_for`]).
pub(super) fn rows_of(holdings: &Holdings, to: u32, unit: &Given, ids: &[u32]) -> Vec<DataRow> {
    if holdings.settled_holder(unit.rows.key.partition, to) {
        return Vec::new();
    }
    match &unit.payload {
        Some(payload) => {
            let source = payload.as_ref();
            ids.iter()
                .map(|&r| DataRow::from_source(source, r))
                .collect()
        }
        None => holdings.ship(ids),
    }
}
