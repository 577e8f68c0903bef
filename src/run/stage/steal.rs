//! `rapid-reassign` in a pipeline: replicas take whole units from each
//! other within an iteration ([`crate::pipeline::steal`]).
//!
//! A replica's first stage owns its list. Having fed it all, it asks every
//! other replica's first stage for units (a round); each answers with a
//! gift, perhaps empty, taken from the end of its list, or has said it is
//! closed. A round that brought nothing closes the list: the first stage
//! tells its replica's other stages (a `Shape`, closed) and the other
//! first stages (`Closed`). Every change of the list reaches the replica's
//! other stages as a `Shape`; a stage runs only the passes its order
//! shares with a longer list until the list is closed. A unit's
//! micro-batches are all computed by one replica and its gradient goes to
//! the shard owners keyed by the unit, so the parameters keep their bits.

use std::collections::BTreeSet;

use super::epoch::micro_batches;
use super::{StageEmit, StageWorker};
use crate::data::UnitKey;
use crate::pipeline::steal::{gift, Asker, Giver, Open};
use crate::pipeline::{Pass, Schedule};
use crate::run::messages::{StageMessage, StealKind, StealMessage};

/// One iteration's list while it may change.
pub(super) struct ListState {
    shape: Open,
    /// Passes run.
    ran: usize,
    closed: bool,
    /// The first stage's forwards and backwards run.
    fed: u32,
    done: u32,
    /// The first stage's round of asking, whether it has asked at all,
    /// the replicas yet to answer it and the units it brought.
    round: u32,
    asked: bool,
    awaiting: BTreeSet<u32>,
    gained: usize,
    /// Replicas whose first stage said it is closed.
    closed_peers: BTreeSet<u32>,
    /// Shapes sent (first stage) or applied (the others).
    seq: u32,
}

impl ListState {
    /// Stage `stage` of `stages` with `micro` micro-batches placed: open.
    pub(super) fn new(schedule: Schedule, (stages, stage): (u32, u32), micro: u32) -> Self {
        let shape = Open::new(schedule, (stages, stage), micro, true)
            .expect("validation checks the schedule against the micro-batches");
        Self {
            shape,
            ran: 0,
            closed: false,
            fed: 0,
            done: 0,
            round: 0,
            asked: false,
            awaiting: BTreeSet::new(),
            gained: 0,
            closed_peers: BTreeSet::new(),
            seq: 0,
        }
    }
}

impl StageWorker {
    /// Whether the stage waits to learn whether its list grows.
    pub(super) fn at_limit(&self) -> bool {
        (self.list.as_ref()).is_some_and(|l| !l.closed && l.ran >= l.shape.limit)
    }

    /// Counts a pass run into the list's state.
    pub(super) fn count_pass(&mut self, pass: Pass) {
        if let Some(l) = self.list.as_mut() {
            l.ran += 1;
            match pass {
                Pass::Forward(_) => l.fed += 1,
                Pass::Backward(_) => l.done += 1,
            }
        }
    }

    /// Files a message about units until its iteration runs here.
    pub(super) fn file_steal(&mut self, message: StealMessage) {
        self.steal_inbox
            .entry(message.iteration)
            .or_default()
            .push(message);
    }

    /// Acts on the messages about units of the iteration running here;
    /// drops those of iterations over (their asks were answered by a
    /// `Closed`).
    pub(super) fn serve_steals(&mut self, emit: &mut StageEmit<'_>) {
        let current = self.epoch.as_ref().map(|e| e.iteration);
        while let Some((&t, _)) = self.steal_inbox.first_key_value() {
            let over = match current {
                Some(c) if t == c => false,
                Some(c) => t < c,
                None => t < self.next_iteration,
            };
            if !over && current != Some(t) {
                break; // an iteration to come
            }
            let messages = self.steal_inbox.remove(&t).unwrap_or_default();
            if !over {
                for message in messages {
                    self.on_steal(message, emit);
                }
            }
        }
    }

    fn on_steal(&mut self, message: StealMessage, emit: &mut StageEmit<'_>) {
        let (stage, from) = (self.stage, message.replica);
        // (`serve_steals` passes only the running iteration's messages)
        let Some(l) = self.list.as_mut() else {
            return;
        };
        match message.kind {
            StealKind::Ask { round, micro_us } => {
                if stage != 0 || l.closed {
                    return; // (its `Closed` answers)
                }
                let units = self.give(Asker { micro_us }, emit);
                self.send_to_first(from, StealKind::Gift { round, units }, emit);
            }
            StealKind::Gift { round, units } => {
                if round != l.round || !l.awaiting.remove(&from) {
                    return;
                }
                l.gained += units.len();
                if !units.is_empty() {
                    let mut list = self.list_keys();
                    list.extend(units);
                    self.relist(list, false, emit);
                }
            }
            StealKind::Closed => {
                l.closed_peers.insert(from);
                l.awaiting.remove(&from);
            }
            StealKind::Shape { units, closed, seq } => {
                if stage == 0 || seq <= l.seq {
                    return;
                }
                l.seq = seq;
                self.relist(units, closed, emit);
            }
        }
    }

    /// The first stage at its limit: asks the replicas still open for
    /// units, or closes its list when the last round brought none (or no
    /// replica is open). Whether the list closed.
    pub(super) fn ask_or_close(&mut self, emit: &mut StageEmit<'_>) -> bool {
        let replicas = self.layout.replicas;
        let me = self.replica;
        let Some(l) = self.list.as_mut() else {
            return false;
        };
        if !l.awaiting.is_empty() {
            return false;
        }
        let open: BTreeSet<u32> = (0..replicas)
            .filter(|r| *r != me && !l.closed_peers.contains(r))
            .collect();
        if (l.asked && l.gained == 0) || open.is_empty() {
            let list = self.list_keys();
            // (the list as it stands, closed)
            self.relist(list, true, emit);
            for r in (0..replicas).filter(|&r| r != me) {
                self.send_to_first(r, StealKind::Closed, emit);
            }
            return true;
        }
        l.round += 1;
        l.asked = true;
        l.gained = 0;
        l.awaiting.clone_from(&open);
        let round = l.round;
        let fed = l.fed.max(1);
        let epoch = self.epoch.as_ref().expect("within an iteration");
        let micro_us = self.cx.now_us().saturating_sub(epoch.ready_us) as f64 / f64::from(fed);
        for r in open {
            self.send_to_first(r, StealKind::Ask { round, micro_us }, emit);
        }
        false
    }

    /// The units this first stage gives `asker` from the end of its list.
    fn give(&mut self, asker: Asker, emit: &mut StageEmit<'_>) -> Vec<(u32, u32)> {
        let l = self.list.as_ref().expect("asked within an iteration");
        let epoch = self.epoch.as_ref().expect("asked within an iteration");
        let mut unit_micro = vec![0u32; epoch.units.len()];
        for b in &epoch.micro {
            unit_micro[b.unit] += 1;
        }
        let least = self.layout.schedule.least_micro(self.layout.stages);
        let giver = Giver {
            unit_micro,
            fed: l.fed,
            done: l.done,
            elapsed_us: self.cx.now_us().saturating_sub(epoch.ready_us) as f64,
            least,
        };
        let n = gift(&giver, asker, self.layout.stages);
        if n == 0 {
            return Vec::new();
        }
        let mut list = self.list_keys();
        let given = list.split_off(list.len() - n);
        self.relist(list, false, emit);
        given
    }

    /// The list's units as (partition, unit).
    fn list_keys(&self) -> Vec<(u32, u32)> {
        let epoch = self.epoch.as_ref().expect("within an iteration");
        (epoch.units.iter())
            .map(|u| (u.key.partition, u.key.unit))
            .collect()
    }

    /// The list becomes `units` (its beginning unchanged), final when
    /// `closed`; the first stage tells its replica's other stages.
    fn relist(&mut self, units: Vec<(u32, u32)>, closed: bool, emit: &mut StageEmit<'_>) {
        let cx = std::sync::Arc::clone(&self.cx);
        let epoch = self.epoch.as_mut().expect("within an iteration");
        let t = epoch.iteration;
        let keep = (epoch.units.iter().zip(&units))
            .take_while(|(u, k)| (u.key.partition, u.key.unit) == **k)
            .count();
        debug_assert!(epoch.folds[keep..].iter().all(Option::is_none));
        epoch.units.truncate(keep);
        epoch.folds.truncate(keep);
        for &(partition, unit) in &units[keep..] {
            epoch
                .units
                .push(cx.unit_rows(t, UnitKey { partition, unit }));
            epoch.folds.push(None);
        }
        epoch.micro = micro_batches(&epoch.units, cx.plan.micro_batch as usize);
        let micro = epoch.micro.len() as u32;
        let l = self.list.as_mut().expect("within an iteration");
        let next = l
            .shape
            .reshaped(
                self.layout.schedule,
                (self.layout.stages, self.stage),
                micro,
                !closed,
                l.ran,
            )
            .expect("a list changes only behind the micro-batches its first stage fed");
        epoch.passes = next.order[l.ran..].iter().copied().collect();
        l.shape = next;
        l.closed = closed;
        if self.stage == 0 {
            l.seq += 1;
            let seq = l.seq;
            let caps = &epoch.caps.traffic;
            for s in 1..self.layout.stages {
                let message = StageMessage::Steal(StealMessage {
                    to: self.layout.worker(self.replica, s),
                    replica: self.replica,
                    iteration: t,
                    kind: StealKind::Shape {
                        units: units.clone(),
                        closed,
                        seq,
                    },
                });
                (emit.traffic)(caps, message);
            }
        }
    }

    fn send_to_first(&self, replica: u32, kind: StealKind, emit: &mut StageEmit<'_>) {
        let epoch = self.epoch.as_ref().expect("within an iteration");
        let message = StageMessage::Steal(StealMessage {
            to: self.layout.worker(replica, 0),
            replica: self.replica,
            iteration: epoch.iteration,
            kind,
        });
        (emit.traffic)(&epoch.caps.traffic, message);
    }
}
