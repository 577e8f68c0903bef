//! What a worker holds of an iteration: its capabilities, parameters and units.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::dataflow::operators::Capability;

use crate::data::{LocalRows, UnitKey, UnitRows};
use crate::policy::handover::{InFlight, CLONE_IN_FLIGHT_MARGIN};
use crate::policy::PeerAgent;
use crate::run::messages::{Carry, GradSlice, Piece, Traffic};
use crate::trace::{UnitAction, UnitRecord};

/// The capabilities of one iteration `t`: gradients, progress, control (at
/// `t`), and placement requests (at `t + 1`).
pub struct Caps {
    /// Gradient slices, at `t`.
    pub grads: Capability<u64>,
    /// Progress reports, at `t`.
    pub progress: Capability<u64>,
    /// Control messages, at `t`.
    pub control: Capability<u64>,
    /// Requests to hold a partition, at `t + 1`.
    pub placement: Capability<u64>,
}

impl Caps {
    /// The capabilities of a later iteration `iteration`.
    pub(super) fn delayed(&self, iteration: u64) -> Caps {
        Caps {
            grads: self.grads.delayed(&iteration),
            progress: self.progress.delayed(&iteration),
            control: self.control.delayed(&iteration),
            placement: self.placement.delayed(&(iteration + 1)),
        }
    }
}

/// A unit a peer handed over.
pub(super) struct Given {
    pub(super) rows: UnitRows,
    /// The unit's rows, when they came with the message (not held here).
    pub(super) payload: Option<Arc<LocalRows>>,
    pub(super) action: UnitAction,
    pub(super) from: u32,
    pub(super) iteration: u64,
    /// The rest of a peer's unit in flight: the running sums of its
    /// micro-batches done there (whose rows this worker skips).
    pub(super) carry: Option<Box<Carry>>,
    /// A piece of the unit only, `rows` being the piece's: the part its
    /// worker kept when it handed the tail to a peer, or that tail.
    pub(super) piece: Option<Piece>,
}

/// The unit a worker computes next, and whether it counts toward the worker's
/// own progress (a peer's unit does not).
pub(super) struct NextUnit {
    pub(super) unit: Given,
    pub(super) counts_as_own: bool,
}

/// The newest complete parameter version a worker holds.
pub(super) struct Latest {
    pub(super) version: u64,
    pub(super) caps: Caps,
    pub(super) params: Arc<Vec<f64>>,
}

/// The iteration a worker is in.
pub(super) struct Epoch {
    pub(super) iteration: u64,
    pub(super) caps: Caps,
    pub(super) params: Arc<Vec<f64>>,
    /// The parameter version the iteration computes with (SSP: ≥ iteration − slack).
    pub(super) params_version: u64,
    pub(super) own: VecDeque<UnitRows>,
    /// Own units cut in two at the broker's order (`ControlKind::Cut`):
    /// the list holds their first part (this piece), a peer their tail.
    pub(super) cut: Vec<(UnitKey, Piece)>,
    /// Peers this worker handed own units to whole while it cut (its agent
    /// hears of them at its next call, in [`Epoch::observe`]).
    pub(super) handed_whole: Vec<u32>,
    /// Units from peers: rows, reassigned or clone, from whom, their iteration.
    pub(super) given_to_me: VecDeque<Given>,
    /// Units the proactive plan gave this worker whose rows came with them
    /// (computed before the own units, as they cannot be passed on; planned
    /// units of partitions held here join the own list, where rapid
    /// reassignment can pass them on).
    pub(super) planned_in: VecDeque<Given>,
    /// Own units cloned to a peer, and to whom.
    pub(super) cloned_out: BTreeMap<UnitKey, u32>,
    /// The unit in flight: its gradient computed, its end not yet reached.
    pub(super) running: Option<Running>,
    pub(super) units_cancelled: u32,
    /// Compute spent on copies another copy beat, µs.
    pub(super) wasted_us: u64,
    /// Clones of peers' units finished here this iteration, with their
    /// compute (µs): wasted if the original's done notice comes after.
    pub(super) clones_done: BTreeMap<(u64, UnitKey), u64>,
    /// Peers that offered help while the unit in flight was not yet late
    /// enough to copy, with their µs per unit: the first copy goes to the
    /// fastest once it is.
    pub(super) waiting_helpers: Vec<(u32, u64)>,
    pub(super) ready_us: u64,
    /// When its first unit of the iteration started, µs (None: none yet).
    pub(super) first_start_us: Option<u64>,
    pub(super) last_end_us: u64,
    /// How long the last unit took, µs.
    pub(super) last_unit_us: u64,
    pub(super) compute_us: u64,
    pub(super) rows: u64,
    pub(super) bytes_sent: u64,
    pub(super) bytes_moved: u64,
    pub(super) units_given: u32,
    pub(super) control: Traffic,
    pub(super) max_slowdown: f64,
    pub(super) delay_us: u64,
    /// How late the previous unit's sleep woke up.
    pub(super) oversleep: Duration,
    pub(super) operator_us_at_start: u64,
    pub(super) units: Vec<UnitRecord>,
    pub(super) units_done: u32,
    /// Whether the worker reported being idle since it last had work.
    pub(super) idle_reported: bool,
    /// Whether this iteration's timing went to the peers (online prediction).
    pub(super) timing_sent: bool,
    /// What the online predictor expected of this worker, µs per unit.
    pub(super) predicted_unit_us: Option<f64>,
    /// Gradient slices of this iteration's finished units not yet sent (see
    /// [`JobPlan::grad_bucket_bytes`](crate::spec::JobPlan::grad_bucket_bytes)),
    /// and their bytes on the wire.
    pub(super) grads_held: Vec<GradSlice>,
    pub(super) grads_held_bytes: u64,
}

impl Epoch {
    /// Iteration `iteration`, begun at `ready_us` with `caps`, parameters
    /// of version `params.1` and the `own` units; `control` is the traffic
    /// sent since the last report, `operator_us` the operator's time so far.
    pub(super) fn start(
        iteration: u64,
        caps: Caps,
        params: (Arc<Vec<f64>>, u64),
        own: VecDeque<UnitRows>,
        ready_us: u64,
        control: Traffic,
        operator_us: u64,
    ) -> Self {
        let (params, params_version) = params;
        Epoch {
            iteration,
            caps,
            params,
            params_version,
            own,
            cut: Vec::new(),
            handed_whole: Vec::new(),
            given_to_me: VecDeque::new(),
            planned_in: VecDeque::new(),
            cloned_out: BTreeMap::new(),
            running: None,
            units_cancelled: 0,
            wasted_us: 0,
            clones_done: BTreeMap::new(),
            waiting_helpers: Vec::new(),
            ready_us,
            first_start_us: None,
            last_end_us: ready_us,
            last_unit_us: 0,
            compute_us: 0,
            rows: 0,
            bytes_sent: 0,
            bytes_moved: 0,
            units_given: 0,
            control,
            max_slowdown: 1.0,
            delay_us: 0,
            oversleep: Duration::ZERO,
            operator_us_at_start: operator_us,
            units: Vec::new(),
            units_done: 0,
            idle_reported: false,
            timing_sent: false,
            predicted_unit_us: None,
            grads_held: Vec::new(),
            grads_held_bytes: 0,
        }
    }

    pub(super) fn has_units(&self) -> bool {
        self.running.is_some()
            || !self.own.is_empty()
            || !self.given_to_me.is_empty()
            || !self.planned_in.is_empty()
    }

    /// How long the unit in flight has run at `now_us`, µs, if one is.
    pub(super) fn running_us(&self, now_us: u64) -> Option<u64> {
        self.running
            .as_ref()
            .map(|r| now_us.saturating_sub(r.start_us))
    }

    /// Tells `agent` what this worker is doing at `now_us` (before any other
    /// call to it), and the own units it handed over whole while it cut.
    pub(super) fn observe(&mut self, agent: &mut PeerAgent, now_us: u64) {
        for to in self.handed_whole.drain(..) {
            agent.handed_own(to);
        }
        agent.observe(
            self.running_us(now_us),
            self.queued(),
            self.own_left(),
            now_us,
        );
    }

    /// Units waiting ahead of the own list (peers' units and planned units
    /// that came with their rows: computed first, not to be passed on).
    pub(super) fn queued(&self) -> usize {
        self.given_to_me.len() + self.planned_in.len()
    }

    /// Whether `given`, queued here, may be passed on to a peer: not a copy,
    /// of this iteration, not a rest (its sums travel only with the message
    /// that hands it over) nor a piece (the owners fold it with the others
    /// of its unit).
    pub(super) fn passable(&self, given: &Given) -> bool {
        given.action != UnitAction::Clone
            && given.iteration == self.iteration
            && given.carry.is_none()
            && given.piece.is_none()
    }

    /// Whether units handed over wait here that may be passed on.
    pub(super) fn holds_passable(&self) -> bool {
        self.given_to_me.iter().any(|g| self.passable(g))
    }

    /// Own units still in the list that could be handed off (not cloned out).
    pub(super) fn own_left(&self) -> usize {
        self.own
            .iter()
            .filter(|u| !self.cloned_out.contains_key(&u.key))
            .count()
    }

    /// Time per unit as it stands, µs (0 before the first unit): the mean
    /// so far this iteration, or the last unit's time when that is longer —
    /// a worker slowed in the middle of an iteration says so at once. The
    /// mean runs from its first unit's start: a late start (the boundary's
    /// work, the machine scheduling it late) is a delay once, not a slower
    /// pace for every unit after it.
    pub(super) fn unit_us(&self) -> u64 {
        pace_us(
            self.first_start_us.unwrap_or(self.ready_us),
            self.last_end_us,
            self.units_done,
            self.last_unit_us,
        )
    }

    /// Takes the unit `worker` computes next: peers' units first (someone
    /// waits for them), then planned units that came with their rows (they
    /// cannot be passed on), then the own list — whose tail stays free to
    /// hand over.
    pub(super) fn next_unit(&mut self, worker: u32) -> Option<NextUnit> {
        if let Some(unit) = self.given_to_me.pop_front() {
            return Some(NextUnit {
                unit,
                counts_as_own: false,
            });
        }
        if let Some(unit) = self.planned_in.pop_front() {
            return Some(NextUnit {
                unit,
                counts_as_own: true,
            });
        }
        let rows = self.own.pop_front()?;
        // (the first part of a unit cut in two: a piece)
        let piece = (self.cut.iter()).find(|c| c.0 == rows.key).map(|c| c.1);
        Some(NextUnit {
            unit: Given {
                rows,
                payload: None,
                action: UnitAction::Assigned,
                from: worker,
                iteration: self.iteration,
                carry: None,
                piece,
            },
            counts_as_own: true,
        })
    }
}

/// [`Epoch::unit_us`]: the mean time per unit of `units` units from the
/// first one's start to the last one's end, or the last unit's time when that
/// is longer.
fn pace_us(first_start_us: u64, last_end_us: u64, units: u32, last_unit_us: u64) -> u64 {
    let mean = last_end_us.saturating_sub(first_start_us) / u64::from(units.max(1));
    mean.max(last_unit_us)
}

/// A unit whose real gradient is computed and whose injected (or paced)
/// remainder runs until `deadline`.
pub(super) struct Running {
    /// The unit, and whether it counts toward the worker's own progress.
    pub(super) next: NextUnit,
    /// When the unit is over.
    pub(super) deadline: Instant,
    /// Whether the unit outlasts its compute (its end waits for the deadline).
    pub(super) stretched: bool,
    /// When it started, µs since the job's start.
    pub(super) start_us: u64,
    pub(super) compute: Duration,
    pub(super) slowdown: f64,
    pub(super) delay: Duration,
    /// How long its gradient takes through a slow link, after its compute
    /// (`slow-link`; zero when the link is not limited).
    pub(super) send: Duration,
    /// The rate its worker's link is limited to, Mbit/s (0: not limited).
    pub(super) link_mbps: f64,
    pub(super) slices: Vec<GradSlice>,
    /// Its micro-batches here (1 for a unit computed at once): they end
    /// evenly spaced until the deadline, which is what its worker sees of
    /// its progress.
    pub(super) micro_batches: u32,
    /// Rows computed here (the unit's, less those a peer folded in before
    /// it handed the rest over).
    pub(super) rows_here: u32,
    /// Rows a peer folded in before it handed the rest over (0: the whole
    /// unit is computed here). A rest is never copied: its sums travel only
    /// with the message that handed it over.
    pub(super) first_rows: u32,
    /// Its micro-batches on their way, when its rest may be handed over
    /// ([`handover::rest_in_flight`](crate::policy::handover::rest_in_flight)):
    /// each is computed as the one before ends. None: computed at its start.
    pub(super) lazy: Option<super::lazy::Lazy>,
    /// From its start to its deadline, µs.
    pub(super) span_us: u64,
    /// When it started.
    pub(super) started: Instant,
}

impl Running {
    /// The unit as its worker sees it at `now_us`: how long it has run and
    /// how many micro-batches have ended.
    pub(super) fn in_flight(&self, now_us: u64) -> InFlight {
        let elapsed_us = now_us.saturating_sub(self.start_us);
        let total = self.micro_batches.max(1);
        let done = match self.span_us {
            0 => total,
            span => (u64::from(total) * elapsed_us / span).min(u64::from(total)) as u32,
        };
        InFlight {
            elapsed_us,
            done,
            total,
            ended_us: self.span_us * u64::from(done) / u64::from(total),
        }
    }

    /// The end of its micro-batch in flight at `now`, when it is computed
    /// micro-batch by micro-batch and that is before its deadline: the
    /// next one is computed then.
    pub(super) fn next_boundary(&self, now: Instant) -> Option<Instant> {
        self.lazy.as_ref()?;
        self.boundaries().find(|&t| t > now && t < self.deadline)
    }

    /// When its micro-batches but the last end (a microsecond after the
    /// moment [`Running::in_flight`] counts them ended).
    fn boundaries(&self) -> impl Iterator<Item = Instant> + '_ {
        let span = Duration::from_micros(self.span_us);
        let total = self.micro_batches.max(1);
        (1..total).map(move |k| {
            self.started + span.mul_f64(f64::from(k) / f64::from(total)) + Duration::from_micros(1)
        })
    }

    /// When its worker next learns something of its progress that could make
    /// it worth a copy on a helper taking `helper_unit_us` per unit: the end
    /// of its next micro-batch, or the moment it has run
    /// [`CLONE_IN_FLIGHT_MARGIN`] helper units; never after its deadline.
    pub(super) fn next_check(&self, helper_unit_us: u64, now: Instant) -> Instant {
        let boundaries = self.boundaries();
        let late = self.started
            + Duration::from_micros(helper_unit_us).mul_f64(CLONE_IN_FLIGHT_MARGIN)
            + Duration::from_micros(1);
        boundaries
            .chain(std::iter::once(late))
            .filter(|&t| t > now)
            .min()
            .unwrap_or(self.deadline)
            .min(self.deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::pace_us;

    #[test]
    fn a_late_first_unit_is_not_a_slow_pace() {
        // Ready at 0, first unit 1,500..3,700 µs: its pace is 2,200 µs,
        // not 3,700 (the broker took such a worker for a straggler).
        assert_eq!(pace_us(1_500, 3_700, 1, 2_200), 2_200);
        // Three units by 8,100 µs, the last 2,200: the mean, 2,200.
        assert_eq!(pace_us(1_500, 8_100, 3, 2_200), 2_200);
        // Slowed in the middle: the last unit's 10,000 µs says so at once.
        assert_eq!(pace_us(1_500, 15_900, 3, 10_000), 10_000);
        assert_eq!(pace_us(0, 0, 0, 0), 0);
    }
}
