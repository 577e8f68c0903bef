//! One iteration replayed: workers, units and control messages as events.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};

use super::{IterationTimings, Planned, TimedUnit};
use crate::data::UnitKey;
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Worker finishes the unit it is computing.
    UnitDone(u32),
    /// A control message reaches `to`.
    Message { to: u32, at: usize },
}

/// A message in flight; units travel with an `Assign`, a `Clone` and a `Done`
/// (`carried[units]` of the replay).
struct Message {
    from: u32,
    kind: ControlKind,
    units: std::ops::Range<usize>,
    /// The next message in its receiver's inbox, once it has arrived.
    next: Option<usize>,
}

#[derive(Default)]
struct Worker {
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
    /// Messages arrived and not read yet: the first and the last (each links
    /// to the next), so an inbox needs no buffer of its own.
    inbox: Option<(usize, usize)>,
    /// Messages to it still in flight.
    in_flight: u32,
    /// When the running unit ends.
    busy_until: u64,
    units_done: u32,
    last_end_us: u64,
    idle_reported: bool,
}

impl Worker {
    /// Ready for a new iteration, keeping its buffers.
    fn clear(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.given.clear();
        self.cloned_out.clear();
        self.skip.clear();
        self.running = None;
        self.inbox = None;
        self.in_flight = 0;
        self.busy_until = 0;
        self.units_done = 0;
        self.last_end_us = 0;
        self.idle_reported = false;
    }

    fn unit_us(&self) -> u64 {
        self.last_end_us / u64::from(self.units_done.max(1))
    }
}

/// Buffers a replay reuses from one iteration to the next (a large replay
/// would otherwise spend much of its time allocating and faulting in memory).
#[derive(Default)]
pub struct Scratch {
    workers: Vec<Worker>,
    events: BinaryHeap<Reverse<(u64, u64)>>,
    in_flight: VecDeque<(u64, u64, Event)>,
    messages: Vec<Option<Message>>,
    carried: Vec<TimedUnit>,
    flat: Vec<TimedUnit>,
    cloned: HashSet<UnitKey>,
    cloned_done: HashSet<UnitKey>,
}

/// The loop's state: workers, agents, pending events and messages.
struct Replay<'a> {
    timings: &'a IterationTimings,
    agents: &'a mut [Option<PeerAgent>],
    latency_us: u64,
    workers: Vec<Worker>,
    /// Unit completions: (time, sequence << 24 | worker), small entries for a
    /// fast heap.
    events: BinaryHeap<Reverse<(u64, u64)>>,
    /// Messages in flight, in arrival order: every message takes the same
    /// latency and the clock never goes back, so they arrive in the order they
    /// were sent and need no heap.
    in_flight: VecDeque<(u64, u64, Event)>,
    seq: u64,
    /// Messages sent, each taken when its receiver reads it.
    messages: Vec<Option<Message>>,
    /// The units messages carry.
    carried: Vec<TimedUnit>,
    /// Every worker's own units, worker after worker.
    flat: Vec<TimedUnit>,
    /// Units with more than one copy, and those of them already finished.
    cloned: HashSet<UnitKey>,
    cloned_done: HashSet<UnitKey>,
    out: Replayed,
}

/// Replays one iteration with the workers' `agents` (None: the worker computes
/// its own units and nothing else, as under `bsp`). Messages take `latency_us`;
/// `planned` are (from, to, message) sent as the iteration begins (a proactive
/// plan's clones).
pub fn replay_iteration(
    timings: &IterationTimings,
    agents: &mut [Option<PeerAgent>],
    latency_us: u64,
    planned: &[(u32, u32, ControlKind)],
) -> Replayed {
    replay_iteration_with(
        &mut Scratch::default(),
        &Planned::new(timings),
        agents,
        latency_us,
        planned,
    )
}

/// [`replay_iteration`] of `lists` (an iteration with a plan's moves),
/// reusing `scratch`'s buffers (its contents do not matter: the outcome is the
/// same as with fresh ones).
pub fn replay_iteration_with(
    scratch: &mut Scratch,
    lists: &Planned<'_>,
    agents: &mut [Option<PeerAgent>],
    latency_us: u64,
    planned: &[(u32, u32, ControlKind)],
) -> Replayed {
    let timings = lists.base;
    let n = lists.workers();
    let mut workers = std::mem::take(&mut scratch.workers);
    workers.resize_with(n, Worker::default);
    workers.iter_mut().for_each(Worker::clear);
    let mut flat = std::mem::take(&mut scratch.flat);
    flat.clear();
    for w in 0..n {
        flat.extend_from_slice(lists.own(w));
    }
    let total = flat.len();
    let mut replay = Replay {
        timings,
        agents,
        latency_us,
        workers,
        events: cleared(&mut scratch.events, BinaryHeap::clear),
        in_flight: cleared(&mut scratch.in_flight, VecDeque::clear),
        seq: 0,
        messages: cleared(&mut scratch.messages, Vec::clear),
        carried: cleared(&mut scratch.carried, Vec::clear),
        flat,
        cloned: cleared(&mut scratch.cloned, HashSet::clear),
        cloned_done: cleared(&mut scratch.cloned_done, HashSet::clear),
        out: Replayed {
            iteration: timings.iteration,
            makespan_us: 0,
            finish_us: vec![0; n],
            executed: Vec::with_capacity(total),
            reassigned: 0,
            wasted: 0,
            messages: 0,
        },
    };
    let mut head = 0;
    for w in 0..n {
        let own = lists.own(w).len();
        if let Some(agent) = replay.agents.get_mut(w).and_then(Option::as_mut) {
            agent.begin(timings.iteration, own as u32);
        }
        replay.workers[w].head = head;
        replay.workers[w].tail = head + own;
        head += own;
    }
    for (from, to, kind) in planned {
        replay.send_all(*from, vec![(*to, kind.clone())], 0);
    }
    for w in 0..n as u32 {
        replay.next_unit(w, 0);
    }
    while let Some((now, _, event)) = replay.pop() {
        match event {
            Event::UnitDone(w) => replay.unit_done(w, now),
            Event::Message { to, at } => {
                replay.workers[to as usize].in_flight -= 1;
                replay.deliver(to, at);
                if replay.workers[to as usize].running.is_none() {
                    replay.read_inbox(to, now);
                    replay.next_unit(to, now);
                }
            }
        }
    }
    *scratch = Scratch {
        workers: replay.workers,
        events: replay.events,
        in_flight: replay.in_flight,
        messages: replay.messages,
        carried: replay.carried,
        flat: replay.flat,
        cloned: replay.cloned,
        cloned_done: replay.cloned_done,
    };
    replay.out
}

/// Takes a buffer out of the scratch, emptied.
fn cleared<T: Default>(buffer: &mut T, clear: impl FnOnce(&mut T)) -> T {
    let mut taken = std::mem::take(buffer);
    clear(&mut taken);
    taken
}

impl Replay<'_> {
    fn push(&mut self, at: u64, event: Event) {
        self.seq += 1;
        match event {
            Event::Message { .. } => self.in_flight.push_back((at, self.seq, event)),
            Event::UnitDone(w) => self
                .events
                .push(Reverse((at, self.seq << 24 | u64::from(w)))),
        }
    }

    /// The earliest event (ties: the first pushed).
    fn pop(&mut self) -> Option<(u64, u64, Event)> {
        let heap = self.events.peek().map(|Reverse((t, s))| (*t, *s >> 24));
        let queue = self.in_flight.front().map(|(t, s, _)| (*t, *s));
        match (heap, queue) {
            (Some(h), Some(q)) if q < h => self.in_flight.pop_front(),
            (Some(_), _) => self
                .events
                .pop()
                .map(|Reverse((t, s))| (t, s >> 24, Event::UnitDone((s & 0xff_ffff) as u32))),
            (None, _) => self.in_flight.pop_front(),
        }
    }

    fn agent(&mut self, w: u32) -> Option<&mut PeerAgent> {
        self.agents.get_mut(w as usize).and_then(Option::as_mut)
    }

    fn unit_done(&mut self, w: u32, now: u64) {
        let worker = &mut self.workers[w as usize];
        let (unit, own, clone_of) = worker.running.take().expect("a unit was running");
        worker.units_done += 1;
        worker.last_end_us = now;
        let unit_us = worker.unit_us();
        self.out.finish_us[w as usize] = now;
        let first = !self.cloned.contains(&unit.key) || self.cloned_done.insert(unit.key);
        if first {
            // The iteration ends when every unit has one finished copy.
            self.out.makespan_us = self.out.makespan_us.max(now);
            self.out.executed.push((unit.key, w));
            if !own {
                self.out.reassigned += 1;
            }
            if self.cloned.contains(&unit.key) {
                // Tell the other holders of a copy to skip theirs.
                let holders: Vec<u32> = if own {
                    let worker = &mut self.workers[w as usize];
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
            if let Some(agent) = self.agent(w) {
                let sends = agent.on_own_unit_done(unit_us);
                self.send_all(w, sends, now);
            }
        }
        self.read_inbox(w, now);
        self.next_unit(w, now);
    }

    /// Messages are read between units, as the compute operator does.
    fn read_inbox(&mut self, w: u32, now: u64) {
        let mut next = self.workers[w as usize]
            .inbox
            .take()
            .map(|(first, _)| first);
        while let Some(at) = next {
            let Some(Message {
                from,
                kind,
                units,
                next: after,
            }) = self.messages[at].take()
            else {
                break; // each message is delivered once
            };
            next = after;
            if let ControlKind::Done = kind {
                self.on_done(w, from, units, now);
                continue;
            }
            let clone = matches!(kind, ControlKind::Clone { .. });
            let worker = &mut self.workers[w as usize];
            worker
                .given
                .extend(self.carried[units].iter().map(|&unit| (unit, from, clone)));
            if !worker.given.is_empty() {
                worker.idle_reported = false;
            }
            let left = (worker.tail - worker.head).saturating_sub(worker.cloned_out.len());
            if let Some(agent) = self.agent(w) {
                let sends = agent.on_message(from, &kind, left);
                self.send_all(w, sends, now);
            }
            if let ControlKind::Decline = kind {
                self.workers[w as usize].idle_reported = false; // try another peer
            }
        }
    }

    /// A peer finished these units first: skip our copies (own or clones).
    fn on_done(&mut self, w: u32, from: u32, units: std::ops::Range<usize>, now: u64) {
        for i in units {
            let unit = self.carried[i];
            let worker = &mut self.workers[w as usize];
            let before = worker.given.len();
            worker
                .given
                .retain(|g| !(g.0.key == unit.key && g.1 == from && g.2));
            if worker.given.len() < before {
                self.out.wasted += 1;
                continue;
            }
            let was_out = worker
                .cloned_out
                .iter()
                .any(|c| c.0 == unit.key && c.1 == from);
            if !was_out {
                continue;
            }
            worker.cloned_out.retain(|c| c.0 != unit.key);
            let pending = self.flat[worker.head..worker.tail]
                .iter()
                .any(|u| u.key == unit.key);
            if pending {
                worker.skip.push(unit.key);
                self.out.wasted += 1;
                let unit_us = worker.unit_us();
                // Its own unit is done, by the clone.
                if let Some(agent) = self.agent(w) {
                    let sends = agent.on_own_unit_done(unit_us);
                    self.send_all(w, sends, now);
                }
            }
        }
    }

    /// Starts the next unit (a peer's first), or offers help when there is none.
    fn next_unit(&mut self, w: u32, now: u64) {
        let worker = &mut self.workers[w as usize];
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
            let us = if own {
                unit.owner_us
            } else {
                (f64::from(unit.rows) * self.timings.us_per_row[w as usize]).round() as u64
            };
            worker.running = Some((unit, own, clone_of));
            worker.busy_until = now + us;
            self.push(now + us, Event::UnitDone(w));
            return;
        }
        if worker.idle_reported {
            return;
        }
        worker.idle_reported = true;
        let unit_us = worker.unit_us();
        let iteration = self.timings.iteration;
        if let Some(agent) = self.agent(w) {
            let offers = agent.on_idle(unit_us, iteration);
            let sends = offers.into_iter().map(|(to, _, kind)| (to, kind)).collect();
            self.send_all(w, sends, now);
        }
    }

    /// Sends the agent's messages; an `Assign` takes its units from the end of
    /// the sender's list before it leaves, as in the timely run; a `Clone`
    /// copies the last ones not cloned yet (the sender keeps them).
    fn send_all(&mut self, from: u32, sends: Vec<(u32, ControlKind)>, now: u64) {
        for (to, kind) in sends {
            let units = match kind {
                ControlKind::Assign { count } => {
                    let giver = &mut self.workers[from as usize];
                    let take = (count as usize).min(giver.tail - giver.head);
                    if take == 0 {
                        continue;
                    }
                    giver.tail -= take;
                    let start = self.carried.len();
                    self.carried
                        .extend_from_slice(&self.flat[giver.tail..giver.tail + take]);
                    start..self.carried.len()
                }
                ControlKind::Clone { count } => {
                    let giver = &self.workers[from as usize];
                    let start = self.carried.len();
                    self.carried.extend(
                        self.flat[giver.head..giver.tail]
                            .iter()
                            .rev()
                            .filter(|u| !giver.cloned_out.iter().any(|c| c.0 == u.key))
                            .take(count as usize),
                    );
                    if self.carried.len() == start {
                        continue;
                    }
                    for u in &self.carried[start..] {
                        self.cloned.insert(u.key);
                        self.workers[from as usize].cloned_out.push((u.key, to));
                    }
                    start..self.carried.len()
                }
                _ => 0..0,
            };
            self.send(from, to, kind, units, now);
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
        self.messages.push(Some(Message {
            from,
            kind,
            units,
            next: None,
        }));
        let at = self.messages.len() - 1;
        let arrives = now + self.latency_us;
        let worker = &mut self.workers[to as usize];
        if worker.running.is_some() && worker.busy_until > arrives && worker.in_flight == 0 {
            // It arrives while the receiver computes and after every message
            // to it before: all arrival would do is append it to the inbox,
            // read when the unit ends. Append it now, sparing the event.
            self.deliver(to, at);
        } else {
            worker.in_flight += 1;
            self.push(arrives, Event::Message { to, at });
        }
    }

    /// Appends message `at` to `to`'s inbox.
    fn deliver(&mut self, to: u32, at: usize) {
        let worker = &mut self.workers[to as usize];
        worker.inbox = match worker.inbox {
            None => Some((at, at)),
            Some((first, last)) => {
                if let Some(m) = self.messages[last].as_mut() {
                    m.next = Some(at);
                }
                Some((first, at))
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{peer_agent, PolicyPlan, ReassignConfig};

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
    }

    #[test]
    fn replay_is_deterministic() {
        let policy = PolicyPlan::RapidReassign(ReassignConfig::default());
        let a = replay_iteration(&timings(), &mut agents(&policy), 7, &[]);
        let b = replay_iteration(&timings(), &mut agents(&policy), 7, &[]);
        assert_eq!(a, b);
    }
}
