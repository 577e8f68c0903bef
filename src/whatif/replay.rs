//! One iteration replayed: workers, units and control messages as events.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::fifo::{Fifo, InFlight};

use super::{IterationTimings, Planned, TimedUnit};
use crate::data::UnitKey;
use crate::policy::handover::{self, Cancelled};
use crate::policy::{ControlKind, PeerAgent};

/// What a replayed iteration came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed {
    /// Iteration.
    pub iteration: u64,
    /// When the last unit finished, µs after the iteration began.
    pub makespan_us: u64,
    /// When each worker finished its last unit, µs.
    pub finish_us: Vec<u64>,
    /// Every unit computed, with the worker that computed it, in finishing order.
    pub executed: Vec<(UnitKey, u32)>,
    /// Units computed by a worker other than their owner (the copy that
    /// finished first, for a cloned unit).
    pub reassigned: u32,
    /// Copies computed after another copy of the same unit had finished, or
    /// dropped on a `Done`.
    pub wasted: u32,
    /// Control messages sent.
    pub messages: u32,
}

pub(super) enum Event {
    /// Worker finishes the unit it is computing.
    UnitDone(u32),
    /// A control message reaches `to`.
    Message { to: u32, message: Message },
}

/// A message in flight; units travel with an `Assign`, a `Clone` and a `Done`
/// (`carried[units]` of the replay).
pub(super) struct Message {
    from: u32,
    units: std::ops::Range<u32>,
    kind: ControlKind,
}

/// A message this lane sent to one of its own workers, in the queue: read
/// in sending order, so the queue is read as it was written (the message
/// sits in it rather than elsewhere in memory).
pub(super) struct Local {
    /// Arrival time and order among ties.
    pub(super) arrives: u64,
    pub(super) order: u64,
    to: u32,
    message: Message,
}

impl InFlight for Local {
    fn arrives(&self) -> u64 {
        self.arrives
    }
    fn order(&self) -> u64 {
        self.order
    }
}

#[derive(Default)]
pub(super) struct Worker {
    /// Its own units still to compute: `flat[head..tail]` of the replay.
    head: usize,
    tail: usize,
    /// Units from peers: (unit, from, whether it is a clone).
    given: VecDeque<(TimedUnit, u32, bool)>,
    /// Own units cloned to peers, with the peer.
    cloned_out: Vec<(UnitKey, u32)>,
    /// Own units a peer's clone finished first: skipped when reached.
    skip: Vec<UnitKey>,
    /// The unit being computed, whether it is one of its own, and the owner
    /// when it is a clone.
    running: Option<(TimedUnit, bool, Option<u32>)>,
    /// Events it has caused this iteration (their order among ties).
    caused: u32,
    /// When the running unit began.
    started: u64,
    units_done: u32,
    last_end_us: u64,
    last_unit_us: u64,
    idle_reported: bool,
}

impl Worker {
    /// Ready for a new iteration, keeping its buffers.
    pub(super) fn clear(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.given.clear();
        self.cloned_out.clear();
        self.skip.clear();
        self.running = None;
        self.caused = 0;
        self.units_done = 0;
        self.last_end_us = 0;
        self.last_unit_us = 0;
        self.idle_reported = false;
    }

    /// Own units still in its list that could be handed off.
    fn left(&self) -> usize {
        (self.tail - self.head).saturating_sub(self.cloned_out.len())
    }

    /// How long the unit it computes has run at `now`, if it computes one.
    fn running_us(&self, now: u64) -> Option<u64> {
        self.running.map(|_| now - self.started)
    }

    /// Time per unit as it stands: the mean so far, or the last unit's time
    /// when that is longer (as the compute operator has it).
    fn unit_us(&self) -> u64 {
        (self.last_end_us / u64::from(self.units_done.max(1))).max(self.last_unit_us)
    }
}

/// What crosses from one lane to another: a message in flight.
pub(super) struct Crossing {
    /// Arrival time and the event's order among ties.
    pub(super) arrives: u64,
    pub(super) order: u64,
    pub(super) from: u32,
    pub(super) to: u32,
    pub(super) kind: ControlKind,
    pub(super) units: Vec<TimedUnit>,
}

/// One lane of an iteration's replay: workers `lo..lo + workers.len()`, their
/// agents, pending events and messages. A replay runs one lane for every
/// worker, or several side by side (see `lanes`).
pub(super) struct Replay<'a> {
    pub(super) timings: &'a IterationTimings,
    /// The slowdowns over the job clock and the iteration's start on it,
    /// when they follow the clock.
    pub(super) clock: Option<(&'a super::Clock, u64)>,
    pub(super) agents: &'a mut [Option<PeerAgent>],
    /// The lane's first worker.
    pub(super) lo: u32,
    pub(super) latency_us: u64,
    pub(super) workers: Vec<Worker>,
    /// Units being computed, by when they end: (time, order among ties),
    /// where the order is (the worker, its count of events so far).
    pub(super) units: BinaryHeap<Reverse<(u64, u64)>>,
    /// Other pending events: (time, order among ties, what), where the order is
    /// (the worker that caused it, its count of events so far): the same
    /// however the workers are split into lanes.
    pub(super) events: BinaryHeap<Reverse<(u64, u64, u64)>>,
    /// Messages this lane sent to its own workers, in sending order.
    pub(super) in_flight: Fifo<Local>,
    /// Messages from the other lane, in its sending order (they come a
    /// window's worth at a time, each window's after the last one's).
    pub(super) crossed: Fifo<Local>,
    /// Messages without latency (they may be due at once), each taken when
    /// its receiver reads it.
    pub(super) messages: Vec<Option<Message>>,
    /// The units messages carry.
    pub(super) carried: Vec<TimedUnit>,
    /// The lane's workers' own units, worker after worker.
    pub(super) flat: Vec<TimedUnit>,
    /// Units with more than one copy, and those of them already finished
    /// (clones never cross lanes: a replay with clones runs one lane).
    pub(super) cloned: Keys,
    pub(super) cloned_done: Keys,
    /// Messages to workers of other lanes, sent since the last exchange.
    pub(super) outbox: Vec<Crossing>,
    /// The lane's part of the outcome (`finish_us` of its workers).
    pub(super) out: Replayed,
}

/// A set of units, looked up at every unit's end when clones race: hashed
/// by a multiply and a rotation per word rather than SipHash (a replay's
/// keys are no adversary's, and only membership is read, never an order).
pub(super) type Keys = HashSet<UnitKey, BuildHasherDefault<KeyHasher>>;

/// The hasher of [`Keys`] (FxHash's step).
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// The flag of a message's event (below it: the message's index, then 24
/// bits of receiver).
const MESSAGE: u64 = 1 << 63;

impl Replay<'_> {
    /// The order among ties of the next event worker `w` causes: (the
    /// worker, its count of events), the same however the workers are split.
    fn next_order(&mut self, w: u32) -> u64 {
        let worker = &mut self.workers[(w - self.lo) as usize];
        worker.caused += 1;
        u64::from(w) << 32 | u64::from(worker.caused)
    }

    /// Files the end of the unit worker `w` starts now, at time `at`.
    fn push_unit_done(&mut self, at: u64, w: u32) {
        let order = self.next_order(w);
        self.units.push(Reverse((at, order)));
    }

    /// When the lane's next event happens, if it has one.
    pub(super) fn head(&self) -> Option<u64> {
        [
            self.units.peek().map(|Reverse((t, _))| *t),
            self.events.peek().map(|Reverse((t, _, _))| *t),
            self.in_flight.due(),
            self.crossed.due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The earliest event before `limit` (ties: in their order).
    fn pop(&mut self, limit: u64) -> Option<(u64, Event)> {
        // The earliest source by (time, order): orders are unique, so no two
        // sources tie. (Compared field by field: built as an array of
        // options and reduced, this stalled on store forwarding.)
        #[derive(Clone, Copy)]
        enum Source {
            Units,
            Heap,
            Crossed,
            Local,
        }
        fn earlier(
            first: &mut Option<(u64, u64, Source)>,
            candidate: Option<(u64, u64)>,
            source: Source,
        ) {
            if let Some((t, order)) = candidate {
                if first.is_none_or(|f| (t, order) < (f.0, f.1)) {
                    *first = Some((t, order, source));
                }
            }
        }
        let mut first = None;
        earlier(
            &mut first,
            self.units.peek().map(|Reverse((t, o))| (*t, *o)),
            Source::Units,
        );
        earlier(
            &mut first,
            self.events.peek().map(|Reverse((t, o, _))| (*t, *o)),
            Source::Heap,
        );
        // A whole window's crossings are in before it runs: their ties are
        // complete.
        earlier(&mut first, self.crossed.head(), Source::Crossed);
        // This lane's own messages due at `due` were sent at `due − L`: once
        // every other event is past that, no more can be, and their ties
        // can be ordered (before, they cannot be first anyway).
        if let Some(due) = self.in_flight.due() {
            if first.is_none_or(|f| f.0 + self.latency_us > due) {
                earlier(&mut first, self.in_flight.head(), Source::Local);
            }
        }
        let (t, order, source) = first?;
        if t >= limit {
            return None;
        }
        let what = match source {
            Source::Units => {
                self.units.pop();
                // A unit's end names its worker in its order (the worker
                // caused it).
                order >> 32
            }
            Source::Heap => self.events.pop()?.0 .2,
            Source::Crossed | Source::Local => {
                let queue = match source {
                    Source::Local => &mut self.in_flight,
                    _ => &mut self.crossed,
                };
                let Local { to, message, .. } = queue.pop()?;
                return Some((t, Event::Message { to, message }));
            }
        };
        let to = (what & 0xff_ffff) as u32;
        if what & MESSAGE == 0 {
            return Some((t, Event::UnitDone(to)));
        }
        // Each message is read once.
        let message = self.messages[((what & !MESSAGE) >> 24) as usize].take()?;
        Some((t, Event::Message { to, message }))
    }

    /// Starts the iteration with the lane's workers' lists in `lists`: every
    /// agent begins, `planned` messages leave and every worker starts its
    /// first unit.
    pub(super) fn start(&mut self, lists: &Planned<'_>, planned: &[(u32, u32, ControlKind)]) {
        let mut head = 0;
        let iteration = self.timings.iteration;
        for (i, worker) in self.workers.iter_mut().enumerate() {
            let own = lists.own(self.lo as usize + i);
            self.flat.extend_from_slice(own);
            worker.clear();
            if let Some(agent) = self.agents.get_mut(i).and_then(Option::as_mut) {
                agent.observe(None, 0, own.len(), 0);
                agent.begin(iteration, own.len() as u32);
                if agent.brokers() {
                    let lists = (0..lists.workers())
                        .map(|w| lists.own(w).len() as u32)
                        .collect();
                    agent.expect_lists(lists);
                }
            }
            worker.head = head;
            worker.tail = head + own.len();
            head += own.len();
        }
        self.out.executed.reserve(self.flat.len());
        for (from, to, kind) in planned {
            self.send_all(*from, vec![(*to, kind.clone())], 0);
        }
        let hi = self.lo + self.workers.len() as u32;
        for w in self.lo..hi {
            self.next_unit(w, 0);
        }
    }

    /// Runs every event before `limit`.
    pub(super) fn run_until(&mut self, limit: u64) {
        while let Some((now, event)) = self.pop(limit) {
            match event {
                Event::UnitDone(w) => self.unit_done(w, now),
                Event::Message { to, message } => {
                    self.read_message(to, message, now);
                    self.next_unit(to, now);
                }
            }
        }
    }

    /// A message from another lane.
    pub(super) fn accept(&mut self, c: Crossing) {
        let start = self.carried.len();
        self.carried.extend_from_slice(&c.units);
        self.crossed.push(Local {
            arrives: c.arrives,
            order: c.order,
            to: c.to,
            message: Message {
                from: c.from,
                kind: c.kind,
                units: start as u32..self.carried.len() as u32,
            },
        });
    }

    /// A message without latency (it may be due right now) on its way to
    /// `to`: filed in the heap, read when it arrives (workers answer at
    /// once, also while computing, as the compute operator does by default).
    fn file(&mut self, arrives: u64, order: u64, to: u32, message: Message) {
        self.messages.push(Some(message));
        let at = self.messages.len() - 1;
        let what = MESSAGE | (at as u64) << 24 | u64::from(to);
        self.events.push(Reverse((arrives, order, what)));
    }

    fn agent(&mut self, w: u32) -> Option<&mut PeerAgent> {
        self.agents
            .get_mut((w - self.lo) as usize)
            .and_then(Option::as_mut)
    }

    /// Worker `w`'s agent, told what the worker is doing at `now`.
    fn observed(&mut self, w: u32, now: u64) -> Option<&mut PeerAgent> {
        let worker = &self.workers[(w - self.lo) as usize];
        let (running, queued, listed) = (worker.running_us(now), worker.given.len(), worker.left());
        let agent = self.agent(w)?;
        agent.observe(running, queued, listed, now);
        Some(agent)
    }

    fn unit_done(&mut self, w: u32, now: u64) {
        let worker = &mut self.workers[(w - self.lo) as usize];
        let (unit, own, clone_of) = worker.running.take().expect("a unit was running");
        worker.units_done += 1;
        worker.last_end_us = now;
        worker.last_unit_us = now - worker.started;
        let unit_us = worker.unit_us();
        self.out.finish_us[(w - self.lo) as usize] = now;
        let raced = !self.cloned.is_empty() && self.cloned.contains(&unit.key);
        let first = !raced || self.cloned_done.insert(unit.key);
        if first {
            // The iteration ends when every unit has one finished copy.
            self.out.makespan_us = self.out.makespan_us.max(now);
            self.out.executed.push((unit.key, w));
            if !own {
                self.out.reassigned += 1;
            }
            if raced {
                // Tell the other holders of a copy to skip theirs.
                let holders: Vec<u32> = if own {
                    let worker = &mut self.workers[(w - self.lo) as usize];
                    let peers = worker
                        .cloned_out
                        .iter()
                        .filter(|c| c.0 == unit.key)
                        .map(|c| c.1)
                        .collect();
                    worker.cloned_out.retain(|c| c.0 != unit.key);
                    peers
                } else {
                    clone_of.into_iter().collect()
                };
                let at = self.carried.len();
                self.carried.push(unit);
                for to in holders {
                    self.send(w, to, ControlKind::Done, at..at + 1, now);
                }
            }
        } else {
            self.out.wasted += 1;
        }
        if own && first {
            if let Some(agent) = self.observed(w, now) {
                let sends = agent.on_own_unit_done(unit_us);
                self.send_all(w, sends, now);
            }
        }
        self.next_unit(w, now);
    }

    /// Worker `w` reads `message` as it arrives (also mid-unit).
    fn read_message(&mut self, w: u32, message: Message, now: u64) {
        let Message { from, kind, units } = message;
        let units = units.start as usize..units.end as usize;
        if let ControlKind::Done = kind {
            self.on_done(w, from, units, now);
            return;
        }
        let clone = matches!(kind, ControlKind::Clone { .. });
        let worker = &mut self.workers[(w - self.lo) as usize];
        if !units.is_empty() {
            worker
                .given
                .extend(self.carried[units].iter().map(|&unit| (unit, from, clone)));
        }
        if !worker.given.is_empty() {
            worker.idle_reported = false;
        }
        let left = worker.left();
        if let Some(agent) = self.observed(w, now) {
            let sends = agent.on_message(from, &kind, left);
            self.send_all(w, sends, now);
        }
        if let ControlKind::Decline = kind {
            self.workers[(w - self.lo) as usize].idle_reported = false; // try another peer
        }
    }

    /// A peer finished these units first: skip our copies (own or clones).
    fn on_done(&mut self, w: u32, from: u32, units: std::ops::Range<usize>, now: u64) {
        for i in units {
            let key = self.carried[i].key;
            let mut lists = LaneLists {
                worker: &mut self.workers[(w - self.lo) as usize],
                flat: &self.flat,
            };
            match handover::done(&mut lists, from, key) {
                Cancelled::Nothing => {}
                Cancelled::Copy => self.out.wasted += 1,
                // (the replay does not clone a unit in flight)
                Cancelled::Own | Cancelled::Running => {
                    self.out.wasted += 1;
                    let unit_us = self.workers[(w - self.lo) as usize].unit_us();
                    // Its own unit is done, by the clone.
                    if let Some(agent) = self.observed(w, now) {
                        let sends = agent.on_own_unit_done(unit_us);
                        self.send_all(w, sends, now);
                    }
                }
            }
        }
    }

    /// Starts the next unit (a peer's first), or offers help when there is none.
    fn next_unit(&mut self, w: u32, now: u64) {
        let worker = &mut self.workers[(w - self.lo) as usize];
        if worker.running.is_some() {
            return;
        }
        let mut next = worker
            .given
            .pop_front()
            .map(|(unit, from, clone)| (unit, false, clone.then_some(from)));
        while next.is_none() && worker.head < worker.tail {
            worker.head += 1;
            let unit = self.flat[worker.head - 1];
            if let Some(i) = worker.skip.iter().position(|&k| k == unit.key) {
                worker.skip.swap_remove(i);
                continue;
            }
            next = Some((unit, true, None));
        }
        if let Some((unit, own, clone_of)) = next {
            let mut us = if own {
                unit.owner_us
            } else {
                (f64::from(unit.rows) * self.timings.us_per_row[w as usize]).round() as u64
            };
            if let Some((clock, start_us)) = self.clock {
                // Costs are without slowdowns: the one at this time applies.
                us = (us as f64 * clock.slowdown(w as usize, start_us + now)).round() as u64;
            }
            worker.running = Some((unit, own, clone_of));
            worker.started = now;
            self.push_unit_done(now + us, w);
            return;
        }
        if worker.idle_reported {
            return;
        }
        worker.idle_reported = true;
        let unit_us = worker.unit_us();
        let iteration = self.timings.iteration;
        if let Some(agent) = self.observed(w, now) {
            let offers = agent.on_idle(unit_us, iteration);
            self.send_all(w, offers.into_iter().map(|(to, _, kind)| (to, kind)), now);
        }
    }

    /// Sends the agent's messages; an `Assign` takes its units from the end of
    /// the sender's list before it leaves, as in the timely run; a `Clone`
    /// copies the last ones not cloned yet, last first (the sender keeps
    /// them; see [`crate::policy::handover`]).
    fn send_all(
        &mut self,
        from: u32,
        sends: impl IntoIterator<Item = (u32, ControlKind)>,
        now: u64,
    ) {
        for (to, kind) in sends {
            let start = self.carried.len();
            let mut lists = LaneLists {
                worker: &mut self.workers[(from - self.lo) as usize],
                flat: &self.flat,
            };
            let handed = match kind {
                ControlKind::Assign { count } | ControlKind::Planned { count } => {
                    Some(handover::give(&mut lists, count, &mut self.carried))
                }
                ControlKind::Clone { count } => Some(handover::clone_out(
                    &mut lists,
                    to,
                    count,
                    &mut self.carried,
                )),
                _ => None,
            };
            if handed == Some(0) {
                continue;
            }
            if let ControlKind::Clone { .. } = kind {
                self.cloned
                    .extend(self.carried[start..].iter().map(|u| u.key));
            }
            self.send(from, to, kind, start..self.carried.len(), now);
        }
    }

    fn send(
        &mut self,
        from: u32,
        to: u32,
        kind: ControlKind,
        units: std::ops::Range<usize>,
        now: u64,
    ) {
        self.out.messages += 1;
        let arrives = now + self.latency_us;
        let order = self.next_order(from);
        let lane = self.lo..self.lo + self.workers.len() as u32;
        if !lane.contains(&to) {
            self.outbox.push(Crossing {
                arrives,
                order,
                from,
                to,
                kind,
                units: self.carried[units].to_vec(),
            });
            return;
        }
        let message = Message {
            from,
            kind,
            units: units.start as u32..units.end as u32,
        };
        if self.latency_us == 0 {
            self.file(arrives, order, to, message);
        } else {
            // Sent now, it arrives after every message in the queue.
            self.in_flight.push(Local {
                arrives,
                order,
                to,
                message,
            });
        }
    }
}

/// A lane's worker's lists for the handover: its own units are
/// `flat[head..tail]`.
struct LaneLists<'a> {
    worker: &'a mut Worker,
    flat: &'a [TimedUnit],
}

impl handover::Lists for LaneLists<'_> {
    type Unit = TimedUnit;

    fn key(unit: &TimedUnit) -> UnitKey {
        unit.key
    }

    fn own(&self) -> impl DoubleEndedIterator<Item = &TimedUnit> {
        self.flat[self.worker.head..self.worker.tail].iter()
    }

    fn pop_own(&mut self) -> Option<TimedUnit> {
        if self.worker.tail == self.worker.head {
            return None;
        }
        self.worker.tail -= 1;
        Some(self.flat[self.worker.tail])
    }

    fn cloned_to(&self, key: UnitKey) -> Option<u32> {
        self.worker
            .cloned_out
            .iter()
            .find(|c| c.0 == key)
            .map(|c| c.1)
    }

    fn set_cloned(&mut self, key: UnitKey, to: Option<u32>) {
        match to {
            Some(to) => self.worker.cloned_out.push((key, to)),
            None => self.worker.cloned_out.retain(|c| c.0 != key),
        }
    }

    fn drop_copy(&mut self, from: u32, key: UnitKey) -> bool {
        let before = self.worker.given.len();
        self.worker
            .given
            .retain(|g| !(g.0.key == key && g.1 == from && g.2));
        self.worker.given.len() < before
    }

    fn skip_own(&mut self, key: UnitKey) -> bool {
        let pending = self.flat[self.worker.head..self.worker.tail]
            .iter()
            .any(|u| u.key == key);
        if pending {
            self.worker.skip.push(key);
        }
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{peer_agent, PolicyPlan, ReassignConfig};
    use crate::whatif::replay_iteration;

    /// Four workers with 8 units of 100 rows each; worker 3 takes 4 µs a row,
    /// the others 1 µs.
    fn timings() -> IterationTimings {
        let us_per_row = vec![1.0, 1.0, 1.0, 4.0];
        let own = (0..4u32)
            .map(|w| {
                (0..8)
                    .map(|u| TimedUnit {
                        key: UnitKey {
                            partition: w,
                            unit: u,
                        },
                        rows: 100,
                        owner_us: (100.0 * us_per_row[w as usize]) as u64,
                    })
                    .collect()
            })
            .collect();
        IterationTimings {
            iteration: 0,
            own,
            us_per_row,
            overhead_us: 0,
        }
    }

    fn agents(policy: &PolicyPlan) -> Vec<Option<PeerAgent>> {
        (0..4).map(|w| peer_agent(policy, w, 4, 4)).collect()
    }

    fn exactly_once(r: &Replayed) {
        let mut keys: Vec<UnitKey> = r.executed.iter().map(|&(k, _)| k).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 32);
        assert_eq!(r.executed.len(), 32, "no unit computed twice");
    }

    #[test]
    fn bsp_replays_to_the_slowest_workers_sum() {
        let r = replay_iteration(&timings(), &mut agents(&PolicyPlan::Bsp), 10, &[]);
        exactly_once(&r);
        assert_eq!(r.makespan_us, 8 * 400);
        assert_eq!(r.finish_us[..3], [800, 800, 800]);
        assert_eq!((r.reassigned, r.messages), (0, 0));
    }

    #[test]
    fn rapid_reassign_moves_the_slow_workers_tail() {
        let policy = PolicyPlan::RapidReassign(ReassignConfig::default());
        let r = replay_iteration(&timings(), &mut agents(&policy), 10, &[]);
        exactly_once(&r);
        assert!(r.reassigned > 0 && r.messages > 0);
        // 32 units of work at speeds 1, 1, 1, 1/4 balance at 32·100/3.25 ≈ 985 µs;
        // whole units and the 75 % checkpoint leave some of the gain (1200 µs).
        assert!(r.makespan_us < 1300, "{r:?}");
        assert!(r
            .executed
            .iter()
            .all(|&(k, w)| k.partition == w || k.partition == 3));
    }

    #[test]
    fn clones_race_and_each_unit_counts_once() {
        let policy = PolicyPlan::Speculate(crate::policy::SpeculateConfig {
            group_size: 3,
            quantile: 0.5,
            multiplier: 1.5,
            max_clone_share: 0.5,
        });
        let bsp = replay_iteration(&timings(), &mut agents(&PolicyPlan::Bsp), 10, &[]);
        let r = replay_iteration(&timings(), &mut agents(&policy), 10, &[]);
        exactly_once(&r);
        assert!(r.reassigned > 0, "a clone finished first: {r:?}");
        assert!(
            r.makespan_us < bsp.makespan_us,
            "{} vs {}",
            r.makespan_us,
            bsp.makespan_us
        );

        // A plan's clones, sent as the iteration begins (proactive-clone): the
        // slow worker's last 4 units are copied to worker 0, which finishes
        // them first; worker 3 skips its copies.
        let planned = [(3, 0, ControlKind::Clone { count: 4 })];
        let r = replay_iteration(&timings(), &mut agents(&PolicyPlan::Bsp), 10, &planned);
        exactly_once(&r);
        assert_eq!(r.reassigned, 4);
        assert!(r.makespan_us <= 4 * 400 + 2 * 10, "{r:?}");
        assert!(r.wasted >= 1, "worker 3 skipped or dropped copies: {r:?}");
        // The copies go last first: worker 0 starts where worker 3 ends.
        let copies: Vec<u32> = r
            .executed
            .iter()
            .filter(|&&(k, w)| w == 0 && k.partition == 3)
            .map(|(k, _)| k.unit)
            .collect();
        assert_eq!(copies, [7, 6, 5, 4]);
    }

    #[test]
    fn replay_is_deterministic() {
        let policy = PolicyPlan::RapidReassign(ReassignConfig::default());
        let a = replay_iteration(&timings(), &mut agents(&policy), 7, &[]);
        let b = replay_iteration(&timings(), &mut agents(&policy), 7, &[]);
        assert_eq!(a, b);
    }
}
