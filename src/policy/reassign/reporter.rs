//! A worker's own side of rapid reassignment: its progress in the current
//! iteration, the reports it owes its helper group, and itself as a giver.

use super::{ControlKind, ReassignAgent};

/// A giver's side of a balance.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Giver {
    /// Own units in its list.
    pub(crate) left: usize,
    /// Its time per unit, µs.
    pub(crate) unit_us: u64,
    /// How long until it starts on its own list, if anything comes first
    /// (the unit in flight, units queued ahead of its own), µs.
    pub(crate) ahead_us: Option<u64>,
}

impl Giver {
    /// Units of its list it keeps at least: one, unless it has other work
    /// first.
    pub(crate) fn keep_least(&self) -> usize {
        usize::from(self.ahead_us.is_none())
    }

    /// When it expects to have finished everything it holds, µs from now.
    pub(crate) fn remaining_us(&self) -> u64 {
        self.ahead_us.unwrap_or(0) + self.left as u64 * self.unit_us
    }
}

/// A worker's own progress in the current iteration and the reports it owes its
/// group: one at `mark` (a share of its own units) and one at the end.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reporter {
    pub(crate) own_total: u32,
    pub(crate) own_done: u32,
    /// Mean time per unit so far this iteration, µs.
    pub(crate) unit_us: u64,
    /// How long the unit in flight has run so far, µs, if one is: a floor
    /// on the time per unit before that unit ends.
    pub(crate) running_us: Option<u64>,
    /// Units queued ahead of its own list (peers' units and planned units
    /// that came with their rows: computed first).
    pub(crate) queued: usize,
    /// Units in its own list (those it may give).
    pub(crate) listed: usize,
    reported_mark: bool,
    reported_end: bool,
    /// Its time per unit when it last reported (or after its first unit),
    /// µs: the yardstick of a slowdown worth a report of its own.
    reported_us: u64,
}

/// A worker whose time per unit has grown this many times since it last
/// reported (or since its first unit) reports at once, when the policy asks
/// for it: a slowdown that began after the mark would otherwise stay unseen
/// until its last unit.
pub const SLOWED: f64 = 1.5;

impl Reporter {
    /// A new iteration with `own_total` units of this worker's own.
    pub(crate) fn begin(&mut self, own_total: u32) {
        *self = Reporter {
            own_total,
            ..Reporter::default()
        };
    }

    /// This worker as a giver with `left` units in its list: its time per
    /// unit as it stands (the mean of the units done, or the unit in
    /// flight's time so far when that is longer) and, by that measure, how
    /// long until it starts on its list (the unit in flight's end, then the
    /// units queued ahead).
    pub(crate) fn giver(&self, left: usize) -> Giver {
        let running = self.running_us;
        let unit_us = self.unit_us.max(running.unwrap_or(0));
        let in_flight = running.map(|r| unit_us - r);
        let queued = self.queued as u64 * unit_us;
        Giver {
            left,
            unit_us,
            ahead_us: (in_flight.is_some() || self.queued > 0)
                .then(|| in_flight.unwrap_or(0) + queued),
        }
    }

    /// [`giver`](Self::giver), leaving out the units queued ahead of the list.
    pub(crate) fn giver_unqueued(&self, left: usize) -> Giver {
        Reporter {
            queued: 0,
            ..self.clone()
        }
        .giver(left)
    }

    /// One own unit is done; returns the reports to send to `group`.
    pub(crate) fn unit_done(
        &mut self,
        unit_us: u64,
        mark: f64,
        on_slowdown: bool,
        group: &[u32],
    ) -> Vec<(u32, ControlKind)> {
        self.own_done += 1;
        self.unit_us = unit_us;
        self.running_us = None;
        if self.reported_us == 0 {
            self.reported_us = unit_us;
        }
        let at_end = self.own_done == self.own_total && !self.reported_end;
        let at_mark =
            ReassignAgent::fraction(self.own_done, self.own_total) >= mark && !self.reported_mark;
        let slowed = on_slowdown
            && self.own_done < self.own_total
            && unit_us as f64 > SLOWED * self.reported_us as f64;
        if !(at_end || at_mark || slowed) {
            return Vec::new();
        }
        self.reported_us = unit_us;
        self.reported_mark |= at_end || at_mark;
        self.reported_end |= at_end;
        let report = self.report(unit_us);
        group.iter().map(|&to| (to, report.clone())).collect()
    }

    /// Its progress report, at `unit_us` per unit. Done of total counts own
    /// units only (helpers offer by them, so only to workers with units to
    /// give: counting the queued ones there made idle peers ask workers with
    /// nothing to give, a quarter more messages); the units queued ahead go
    /// apart, for givers' balances.
    pub(crate) fn report(&self, unit_us: u64) -> ControlKind {
        ControlKind::Progress {
            done: self.own_done,
            total: self.own_total,
            queued: self.queued as u32,
            unit_us,
        }
    }
}
