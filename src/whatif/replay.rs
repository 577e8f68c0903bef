//! One iteration replayed: workers, units and control messages as events.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use smallvec::SmallVec;

use super::fifo::{Fifo, InFlight};

use super::{IterationTimings, Planned, TimedUnit};
use crate::data::UnitKey;
use crate::policy::handover::{self, Cancelled, Taker};
use crate::policy::{ControlKind, PeerAgent};

mod in_flight;
mod keys;
mod lists;
mod worker;
pub(super) use self::keys::FirstEnds;
use self::lists::LaneLists;
pub(super) use self::worker::Worker;

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
    /// Worker finishes the unit it is computing (the order of the end filed
    /// when it began: a unit stopped before is no longer awaited).
    UnitDone(u32, u64),
    /// Worker looks again whether its unit in flight is late enough for a
    /// copy on the fastest helper waiting (the order filed with it: only the
    /// last one filed counts).
    Check(u32, u64),
    /// Worker 0's broker's time to balance without the paces missing (the
    /// order filed with it: only the last one filed counts).
    BrokerDue(u64),
    /// A control message reaches `to`.
    Message { to: u32, message: Message },
}

/// A finished copy of a unit that had more than one.
pub(super) struct Race {
    key: UnitKey,
    /// When it finished, and its end's order among ties.
    at: u64,
    order: u64,
    worker: u32,
    /// Whether the unit was its worker's own.
    own: bool,
}

/// Settles the races of every lane into `out`: the first copy of each unit
/// to finish (by time, then order) counts, as at its shard owner, and every
/// later one is wasted. The settled units follow `out.executed`'s, in their
/// finishing order.
pub(super) fn settle_races(out: &mut Replayed, races: &mut Vec<Race>) {
    races.sort_unstable_by_key(|r| (r.key, r.at, r.order));
    let before = races.len();
    races.dedup_by_key(|r| r.key);
    out.wasted += (before - races.len()) as u32;
    races.sort_unstable_by_key(|r| (r.at, r.order));
    for r in races.drain(..) {
        out.makespan_us = out.makespan_us.max(r.at);
        out.executed.push((r.key, r.worker));
        if !r.own {
            out.reassigned += 1;
        }
    }
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
///
/// A report sent to several of them at once is one entry: its first
/// receiver (and that copy's order) here, the others in the lane's
/// `fanouts[fan..fan + more]`, read one after the other (a group's reports
/// were most of a large replay's queue, eight copies of one message).
pub(super) struct Local {
    /// Arrival time and order among ties.
    pub(super) arrives: u64,
    pub(super) order: u64,
    to: u32,
    more: u32,
    fan: u32,
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

/// One lane of an iteration's replay: the workers `ids`, their
/// agents, pending events and messages. A replay runs one lane for every
/// worker, or several side by side (see `lanes`).
pub(super) struct Replay<'a> {
    pub(super) timings: &'a IterationTimings,
    /// The slowdowns over the job clock and the iteration's start on it,
    /// when they follow the clock.
    pub(super) clock: Option<(&'a super::Clock, u64)>,
    /// The lane's workers' agents, in the order of `ids`.
    pub(super) agents: Vec<&'a mut Option<PeerAgent>>,
    /// The lane's workers, ascending, and for every worker of the
    /// iteration its lane and its place there ([`Layout`](super::lanes)).
    pub(super) ids: &'a [u32],
    pub(super) slot: &'a [u32],
    pub(super) lane: u32,
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
    /// The further receivers of reports sent to several (see [`Local`]):
    /// (worker, the copy's order).
    pub(super) fanouts: Vec<(u32, u64)>,
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
    /// Whether a worker with nothing to give answers an offer of help with
    /// a copy of its unit in flight ([`handover::clone_in_flight`]).
    pub(super) clone_in_flight: bool,
    /// Whether it answers with the rest of its unit in flight instead,
    /// between micro-batches ([`handover::rest_in_flight`]).
    pub(super) rest_in_flight: bool,
    /// Whether it answers with the tail of its unit in flight, going on
    /// with the rest ([`handover::tail_in_flight`]).
    pub(super) tail_in_flight: bool,
    /// Copies of raced units (cloned out, or clones) that this lane's
    /// workers finished: which came first is settled when every lane is
    /// done ([`settle_races`]), as a shard owner takes the first gradient
    /// of a unit to arrive.
    pub(super) races: Vec<Race>,
    /// Units of the iteration, all lanes': the iteration ends when each
    /// has a finished copy.
    pub(super) units_total: usize,
    /// This lane's units finished with no other copy, and the first end of
    /// each raced unit it finished a copy of: (unit, time).
    pub(super) plain_done: usize,
    /// Tails this lane's workers handed over from their units in flight:
    /// each is one more part to end (counted in `plain_done` when it does)
    /// before the iteration has.
    pub(super) tails_split: usize,
    pub(super) first_raced: FirstEnds,
    /// Whether the lane runs alone: it then sees the iteration end itself
    /// (side by side, the lanes settle it at their exchanges).
    pub(super) alone: bool,
    /// Events from this time on are not replayed: the workers hear that
    /// the iteration ended a message's time after its last unit ended, and
    /// leave it (u64::MAX until then).
    pub(super) end_limit: u64,
    /// Messages to workers of other lanes, sent since the last exchange.
    pub(super) outbox: Vec<Crossing>,
    /// The lane's part of the outcome (`finish_us` of its workers).
    pub(super) out: Replayed,
    /// The order and time of worker 0's broker's event last filed (0: none
    /// awaited).
    pub(super) broker_order: u64,
    pub(super) broker_at: u64,
}

/// The flag of a message's event (below it: the message's index, then 24
/// bits of receiver).
const MESSAGE: u64 = 1 << 63;

/// The flag of a check's event (below it, 24 bits of worker).
const CHECK: u64 = 1 << 62;

/// The flag of the broker's event (worker 0's).
const BROKER_DUE: u64 = 1 << 61;

/// The bit of a worker's slot that names its lane (below it, its place).
pub(super) const LANE_BIT: u32 = 1 << 31;

/// Worker `w`'s place in its lane, by the lanes' `slot`s.
#[inline]
fn place(slot: &[u32], w: u32) -> usize {
    (slot[w as usize] & !LANE_BIT) as usize
}

impl Replay<'_> {
    /// Whether the lane holds worker `w`.
    #[inline]
    fn holds(&self, w: u32) -> bool {
        (self.slot[w as usize] >= LANE_BIT) == (self.lane == 1)
    }

    /// The order among ties of the next event worker `w` causes: (the
    /// worker, its count of events), the same however the workers are split.
    fn next_order(&mut self, w: u32) -> u64 {
        let worker = &mut self.workers[place(self.slot, w)];
        worker.caused += 1;
        u64::from(w) << 32 | u64::from(worker.caused)
    }

    /// Files the end of the unit worker `w` starts now, at time `at`.
    fn push_unit_done(&mut self, at: u64, w: u32) {
        let order = self.next_order(w);
        let worker = &mut self.workers[place(self.slot, w)];
        worker.ends = at;
        worker.end_order = order;
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
            if first.is_none_or(|f| f.0.saturating_add(self.latency_us) > due) {
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
            Source::Crossed => {
                let Local { to, message, .. } = self.crossed.pop()?;
                return Some((t, Event::Message { to, message }));
            }
            Source::Local => {
                let front = self.in_flight.front_mut()?;
                if front.more == 0 {
                    let Local { to, message, .. } = self.in_flight.pop()?;
                    return Some((t, Event::Message { to, message }));
                }
                // One copy of a report to several: the entry stays for the
                // next receiver, whose order follows this one's.
                let to = front.to;
                let message = Message {
                    from: front.message.from,
                    units: front.message.units.clone(),
                    kind: front.message.kind.clone(),
                };
                (front.to, front.order) = self.fanouts[front.fan as usize];
                front.fan += 1;
                front.more -= 1;
                return Some((t, Event::Message { to, message }));
            }
        };
        let to = (what & 0xff_ffff) as u32;
        if what & BROKER_DUE != 0 {
            return Some((t, Event::BrokerDue(order)));
        }
        if what & CHECK != 0 {
            return Some((t, Event::Check(to, order)));
        }
        if what & MESSAGE == 0 {
            return Some((t, Event::UnitDone(to, order)));
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
            let own = lists.own(self.ids[i] as usize);
            self.flat.extend_from_slice(own);
            worker.clear();
            if let Some(agent) = self.agents.get_mut(i).and_then(|a| a.as_mut()) {
                agent.observe(None, 0, own.len(), 0);
                agent.begin(iteration, own.len() as u32);
                if agent.brokers() {
                    let lists = (0..lists.workers())
                        .map(|w| lists.own(w).len() as u32)
                        .collect();
                    agent.expect_lists(lists);
                }
            }
            // A worker absent from the trace's iteration (an import whose
            // job lost workers) is not there to offer help or take units.
            worker.idle_reported = !lists.present(self.ids[i] as usize);
            worker.head = head;
            worker.tail = head + own.len();
            head += own.len();
        }
        self.out.executed.reserve(self.flat.len());
        for (from, to, kind) in planned {
            if self.holds(*from) {
                self.send_all(*from, [(*to, kind.clone())], 0);
            }
        }
        for i in 0..self.ids.len() {
            self.next_unit(self.ids[i], 0);
        }
    }

    /// Runs every event before `limit`.
    pub(super) fn run_until(&mut self, limit: u64) {
        while let Some((now, event)) = self.pop(limit.min(self.end_limit)) {
            match event {
                Event::UnitDone(w, order) => {
                    // (a unit stopped for a copy that came first: not awaited)
                    if self.workers[place(self.slot, w)].end_order == order {
                        self.unit_done(w, now);
                        if w == 0 {
                            self.file_broker_due(now);
                        }
                    }
                }
                Event::Check(w, order) => {
                    if self.workers[place(self.slot, w)].check_order == order {
                        self.copy_to_waiting_helper(w, now);
                    }
                }
                Event::BrokerDue(order) => {
                    if self.broker_order == order {
                        self.broker_due(now);
                    }
                }
                Event::Message { to, message } => {
                    self.read_message(to, message, now);
                    self.next_unit(to, now);
                    if to == 0 {
                        self.file_broker_due(now);
                    }
                }
            }
        }
    }

    /// Files worker 0's broker's time to balance without the paces missing,
    /// once it knows it (a quorum in), or anew when it moved.
    fn file_broker_due(&mut self, now: u64) {
        if !self.holds(0) {
            return;
        }
        let Some(due) = self.agent(0).and_then(PeerAgent::broker_due) else {
            return;
        };
        let due = due.max(now);
        if self.broker_order != 0 && self.broker_at == due {
            return;
        }
        let order = self.next_order(0);
        self.broker_order = order;
        self.broker_at = due;
        self.events.push(Reverse((due, order, BROKER_DUE)));
    }

    /// Worker 0's broker balances without the paces missing.
    fn broker_due(&mut self, now: u64) {
        self.broker_order = 0;
        let left = self.workers[0].left();
        if let Some(agent) = self.observed(0, now) {
            let sends = agent.on_broker_time(left);
            self.send_all(0, sends, now);
        }
        self.next_unit(0, now);
    }

    /// A message from another lane.
    pub(super) fn accept(&mut self, c: Crossing) {
        let start = self.carried.len();
        self.carried.extend_from_slice(&c.units);
        self.crossed.push(Local {
            arrives: c.arrives,
            order: c.order,
            to: c.to,
            more: 0,
            fan: 0,
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
        let at = place(self.slot, w);
        self.agents.get_mut(at).and_then(|a| a.as_mut())
    }

    /// Worker `w`'s agent, told what the worker is doing at `now`.
    fn observed(&mut self, w: u32, now: u64) -> Option<&mut PeerAgent> {
        let worker = &self.workers[place(self.slot, w)];
        let (running, queued, listed) = (worker.running_us(now), worker.given.len(), worker.left());
        let agent = self.agent(w)?;
        agent.observe(running, queued, listed, now);
        Some(agent)
    }

    fn unit_done(&mut self, w: u32, now: u64) {
        let worker = &mut self.workers[place(self.slot, w)];
        let (unit, own, clone_of) = worker.running.take().expect("a unit was running");
        // (its end's order, unique in the iteration: which copy of a raced
        // unit came first, among copies that ended at the same time)
        let order = std::mem::take(&mut worker.end_order);
        worker.units_done += 1;
        worker.last_end_us = now;
        worker.last_unit_us = now - worker.started;
        let unit_us = worker.unit_us();
        self.out.finish_us[place(self.slot, w)] = now;
        // A copy races another when it is a clone, or its worker cloned it
        // out: each copy's worker tells the other holders it is done (it
        // cannot know whether it came first; a notice about a unit finished
        // already is read and dropped), as the run's worker does.
        let worker = &mut self.workers[place(self.slot, w)];
        let holders: SmallVec<[u32; 2]> = match clone_of {
            Some(owner) => smallvec::smallvec![owner],
            None => {
                let peers = worker
                    .cloned_out
                    .iter()
                    .filter(|c| c.0 == unit.key)
                    .map(|c| c.1)
                    .collect();
                worker.cloned_out.retain(|c| c.0 != unit.key);
                peers
            }
        };
        if unit.piece {
            // A tail: the iteration waits for it too.
            self.out.makespan_us = self.out.makespan_us.max(now);
            self.plain_done += 1;
        } else if holders.is_empty() {
            // The iteration ends when every unit has one finished copy.
            self.out.makespan_us = self.out.makespan_us.max(now);
            self.plain_done += 1;
            self.out.executed.push((unit.key, w));
            if !own {
                self.out.reassigned += 1;
            }
        } else {
            self.races.push(Race {
                key: unit.key,
                at: now,
                order,
                worker: w,
                own,
            });
            self.first_raced.entry(unit.key).or_insert(now);
            let at = self.carried.len();
            self.carried.push(unit);
            for to in holders {
                self.send(w, to, ControlKind::Done, at..at + 1, now);
            }
        }
        let ended = self.plain_done + self.first_raced.len() == self.units_total + self.tails_split;
        if self.alone && ended && self.end_limit == u64::MAX {
            self.end_at(now);
        }
        if own {
            if let Some(agent) = self.observed(w, now) {
                let sends = agent.on_own_unit_done(unit_us);
                self.send_all(w, sends, now);
            }
        }
        self.next_unit(w, now);
    }

    /// Counts the copies the workers still hold when the iteration ended
    /// as wasted (nothing of a unit finished elsewhere counts).
    pub(super) fn count_copies_left(&mut self) {
        if self.end_limit != u64::MAX {
            self.out.wasted += self.workers.iter().map(Worker::copies_left).sum::<u32>();
        }
    }

    /// The iteration's last unit ended at `makespan`: the workers hear of
    /// it a message's time later (at once without latency), and nothing
    /// after that is replayed.
    pub(super) fn end_at(&mut self, makespan: u64) {
        self.end_limit = makespan.saturating_add(self.latency_us.max(1));
    }

    /// Worker `w` reads `message` as it arrives (also mid-unit).
    fn read_message(&mut self, w: u32, message: Message, now: u64) {
        let Message { from, kind, units } = message;
        let units = units.start as usize..units.end as usize;
        let handed = !units.is_empty() && matches!(kind, ControlKind::Assign { .. });
        if let ControlKind::Done = kind {
            self.on_done(w, from, units, now);
            return;
        }
        let clone = matches!(kind, ControlKind::Clone { .. });
        let worker = &mut self.workers[place(self.slot, w)];
        // (whether handed units already waited here when these came)
        let waited = worker.holds_passable();
        if !units.is_empty() {
            worker
                .given
                .extend(self.carried[units].iter().map(|&unit| (unit, from, clone)));
        }
        let holds_given = !worker.given.is_empty();
        if holds_given {
            worker.idle_reported = false;
        }
        let left = worker.left();
        if let Some(agent) = self.observed(w, now) {
            let mut sends = agent.on_message(from, &kind, left);
            // Only units queued here may be passed on to a reporter
            // (`pass_queued`): without them its share is not needed.
            let takers = if holds_given { agent.takers() } else { 1 };
            if let (ControlKind::Offer { unit_us }, [(to, ControlKind::Decline)]) =
                (&kind, sends.as_slice())
            {
                // Nothing in the list to give: the unit in flight, if it is
                // far from its end, is worth a copy.
                let helper = (*to, *unit_us);
                if self.clone_in_flight
                    && (self.pass_queued(w, *to, Taker::idle(*unit_us), now)
                        || self.tail_in_flight(w, helper, now)
                        || self.rest_in_flight(w, helper, now)
                        || self.copy_in_flight(w, helper, now))
                {
                    sends.clear();
                }
            }
            if self.clone_in_flight {
                // A peer with less work left than the units queued here.
                if let Some(taker) = handover::report_taker(&kind, &sends, takers) {
                    self.pass_queued(w, from, taker, now);
                }
            }
            self.send_all(w, sends, now);
            if self.clone_in_flight && handed && waited {
                // Handed units from two sides: those waiting here unbegun
                // (these among them) on to the peer expected free first, as
                // far as that gains (once an iteration).
                if let Some(taker) = self.agent(w).and_then(|a| a.freest_peer(from)) {
                    if self.pass_queued(w, taker.0, taker.1, now) {
                        if let Some(agent) = self.agent(w) {
                            agent.forwarded();
                        }
                    }
                }
            }
        }
        if let ControlKind::Decline = kind {
            self.workers[place(self.slot, w)].idle_reported = false; // try another peer
        }
    }

    /// A peer finished these units first: skip our copies (own or clones).
    fn on_done(&mut self, w: u32, from: u32, units: std::ops::Range<usize>, now: u64) {
        for i in units {
            let key = self.carried[i].key;
            let mut lists = LaneLists {
                worker: &mut self.workers[place(self.slot, w)],
                flat: &self.flat,
            };
            match handover::done(&mut lists, from, key) {
                Cancelled::Nothing => {}
                Cancelled::Copy | Cancelled::Handed => self.out.wasted += 1,
                Cancelled::Own | Cancelled::Running => {
                    self.out.wasted += 1;
                    let unit_us = self.workers[place(self.slot, w)].unit_us();
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
        let worker = &mut self.workers[place(self.slot, w)];
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
                us = clock.span(w as usize, start_us + now, us);
            }
            // (only worker 0's agent holds the broker, which reads it; the
            // first part of a unit cut in two has fewer than the others)
            let whole = !worker.cut.contains(&unit.key);
            if own && w == 0 && whole {
                let agent = self.agents.get_mut(place(self.slot, w));
                if let Some(agent) = agent.and_then(|a| a.as_mut()) {
                    agent.set_micro_batches(unit.micro_batches);
                }
            }
            worker.running = Some((unit, own, clone_of));
            // (the first part of an own unit cut in two is held as one
            // whose tail went)
            worker.tailed = own && !whole;
            worker.started = now;
            self.push_unit_done(now + us, w);
            self.file_check(w, now);
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
        // Whether the queue's last entry is a report this call sent, to
        // which copies of the same report for the lane's workers join.
        let mut reporting = false;
        for (to, kind) in sends {
            if let ControlKind::Progress { .. } = kind {
                if self.latency_us > 0 && self.holds(to) {
                    if reporting && self.join_report(from, to, &kind) {
                        continue;
                    }
                    self.send(from, to, kind, 0..0, now);
                    reporting = true;
                    continue;
                }
            } else if self.latency_us == 0 || self.holds(to) {
                reporting = false;
            }
            if let ControlKind::Cut { count } = kind {
                self.cut_last(from, to, count, now);
                continue;
            }
            let start = self.carried.len();
            let mut lists = LaneLists {
                worker: &mut self.workers[place(self.slot, from)],
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
            self.send(from, to, kind, start..self.carried.len(), now);
        }
    }

    /// Sends `to` a copy of `report`, which `from` just sent to another
    /// worker of the lane (the queue's last entry), as a further receiver of
    /// that entry. Returns whether it joined.
    fn join_report(&mut self, from: u32, to: u32, report: &ControlKind) -> bool {
        let fan = self.fanouts.len() as u32;
        let joins = self.in_flight.back_mut().is_some_and(|back| {
            back.message.from == from
                && back.message.kind == *report
                && (back.more == 0 || back.fan + back.more == fan)
        });
        if !joins {
            return false;
        }
        let order = self.next_order(from);
        self.out.messages += 1;
        self.fanouts.push((to, order));
        if let Some(back) = self.in_flight.back_mut() {
            if back.more == 0 {
                back.fan = fan;
            }
            back.more += 1;
        }
        true
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
        let arrives = now.saturating_add(self.latency_us);
        let order = self.next_order(from);
        if !self.holds(to) {
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
                more: 0,
                fan: 0,
                message,
            });
        }
    }
}

#[cfg(test)]
mod tests;
