//! At an iteration's start: the predictive policies' decision (the proactive
//! plan, its clones, dpro-substitute), made by [`crate::policy::decide`] and
//! applied here.

use super::control::send_all;
use super::epoch::Epoch;
use super::{ComputeState, Emit};
use crate::data::UnitRows;
use crate::policy::boundary::Action;
use crate::policy::{decide, order_for_gifts, ControlKind, Decision, Known, Move};
use crate::run::context::JobContext;
use crate::run::messages::GradSlice;

impl ComputeState {
    /// At the start of an iteration: the policy's decision
    /// ([`crate::policy::decide`]) from the timings so far, and this
    /// worker's share of it: its gifts of the planned moves (units of
    /// partitions the receiver holds first), its clones, or its
    /// substitution. Returns the plan's moves (every worker's: none when the
    /// plan clones or substitutes instead).
    pub(super) fn plan_ahead(&mut self, emit: &mut Emit<'_>) -> Vec<Move> {
        let (Some(history), Some(predictor), Some(epoch)) = (
            self.history.as_ref(),
            self.cx.predictor.as_ref(),
            self.epoch.as_mut(),
        ) else {
            return Vec::new();
        };
        let own: Vec<u32> = (0..self.cx.plan.workers)
            .map(|w| self.cx.own_units(w))
            .collect();
        let known = Known {
            history,
            predictor,
            iteration: epoch.iteration,
            own: &own,
        };
        let Decision { predicted, action } = decide(&self.cx.plan.policy, &known);
        epoch.predicted_unit_us = predicted.get(self.worker as usize).copied().flatten();
        let moves = match action {
            Action::Keep => return Vec::new(),
            Action::Substitute { .. } => {
                let partitions = self.cx.assignment(self.worker);
                if let Some(kept) = action.kept_partitions(self.worker, partitions) {
                    substitute(&self.cx, self.worker, epoch, &kept, emit);
                }
                return Vec::new();
            }
            Action::Clone(moves) => {
                // Clones: the predicted-slow worker keeps its units; the first
                // copy to finish wins and the other side skips or discards its
                // copy.
                let mine: Vec<(u32, ControlKind)> = moves
                    .into_iter()
                    .filter(|m| m.from == self.worker)
                    .map(|m| (m.to, ControlKind::Clone { count: m.count }))
                    .collect();
                send_all((&self.cx, self.worker, &self.holdings), epoch, mine, emit);
                return Vec::new();
            }
            Action::Move(moves) => moves,
        };
        let gifts: Vec<Move> = moves
            .iter()
            .filter(|m| m.from == self.worker)
            .copied()
            .collect();
        // `send_all` gives units from the end of the list: put the units each
        // receiver already holds there, in the order the moves are sent.
        let holdings = &self.holdings;
        let units: Vec<UnitRows> = epoch.own.drain(..).collect();
        epoch.own = order_for_gifts(
            units,
            |u| u.key.partition,
            &gifts,
            |partition, to| holdings.settled_holder(partition, to),
        )
        .into();
        let mine: Vec<(u32, ControlKind)> = gifts
            .iter()
            .map(|m| (m.to, ControlKind::Planned { count: m.count }))
            .collect();
        send_all((&self.cx, self.worker, holdings), epoch, mine, emit);
        moves
    }
}

/// dpro-substitute, when [`substitution`] predicts this worker slow: it keeps
/// only the units of the `kept` partitions and tells every shard owner to use
/// the other units' last gradients.
fn substitute(cx: &JobContext, worker: u32, epoch: &mut Epoch, kept: &[u32], emit: &mut Emit<'_>) {
    let (stay, skip): (Vec<UnitRows>, Vec<UnitRows>) = epoch
        .own
        .drain(..)
        .partition(|u| kept.contains(&u.key.partition));
    epoch.own = stay.into();
    let iteration = epoch.iteration;
    let markers: Vec<GradSlice> = skip
        .iter()
        .flat_map(|u| {
            (0..cx.shards.len() as u32).map(move |owner| GradSlice {
                owner,
                iteration,
                partition: u.key.partition,
                unit: u.key.unit,
                executor: worker,
                rows: u.rows.len() as u32,
                loss_sum: 0.0,
                update: crate::workload::Update::zero(),
                substitute: true,
                stop_at: cx.stop.at(),
                sent_us: 0,
                span: None,
                piece: None,
            })
        })
        .collect();
    (emit.grads)(&epoch.caps.grads, markers);
}
