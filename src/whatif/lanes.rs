//! An iteration's replay, on one core or split between two.
//!
//! Split, each core runs a lane of the workers, in windows: every message
//! takes the latency L, so nothing a lane does at time t reaches the other
//! before t + L, and with T the earliest pending event of both, each lane
//! can run every event before T + L on its own. Then the lanes swap the
//! messages they sent each other and begin the next window.
//! Ties between events are broken by the worker that caused them and its
//! count of events, so the outcome is the same to the bit on one lane or two.
//!
//! The lanes hold alternate blocks of [`BLOCK`] workers rather than a half
//! each: a worker's messages mostly go to its neighbours (its helper group),
//! so few cross, and what happens at one moment of an iteration (a burst of
//! reports, the units a balance put on the first workers) falls on both
//! lanes alike. Cut in halves, the lanes took turns waiting for each other,
//! window after window.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::replay::{Crossing, Replay, Worker, LANE_BIT};
use super::{IterationTimings, Planned, Replayed, TimedUnit};
use crate::data::UnitKey;
use crate::policy::{ControlKind, PeerAgent};

/// Workers in a block of a lane ([`Layout`]).
const BLOCK: usize = 128;

/// Workers below which an iteration is not split (a window's exchange costs
/// more than the lane saves).
const SPLIT_FROM: usize = 2048;

/// One lane's buffers, kept from one iteration to the next (a large replay
/// would otherwise spend much of its time allocating and faulting in memory).
#[derive(Default)]
struct LaneBuffers {
    workers: Vec<Worker>,
    units: BinaryHeap<std::cmp::Reverse<(u64, u64)>>,
    events: BinaryHeap<std::cmp::Reverse<(u64, u64, u64)>>,
    in_flight: super::fifo::Fifo<super::replay::Local>,
    fanouts: Vec<(u32, u64)>,
    crossed: super::fifo::Fifo<super::replay::Local>,
    messages: Vec<Option<super::replay::Message>>,
    carried: Vec<TimedUnit>,
    flat: Vec<TimedUnit>,
    races: Vec<super::replay::Race>,
    first_raced: super::replay::FirstEnds,
    outbox: Vec<Crossing>,
}

/// Which lane holds each worker: for every worker its lane (the top bit,
/// [`LANE_BIT`]) and its place there, and each lane's workers, ascending.
#[derive(Default)]
struct Layout {
    slot: Vec<u32>,
    ids: [Vec<u32>; 2],
}

impl Layout {
    /// `n` workers on one lane, or on two in alternate blocks of [`BLOCK`].
    fn lay_out(&mut self, n: usize, lanes: usize) {
        self.slot.clear();
        self.ids.iter_mut().for_each(Vec::clear);
        for w in 0..n {
            let lane = (w / BLOCK) % lanes;
            let place = self.ids[lane].len() as u32;
            self.slot.push(place | if lane == 1 { LANE_BIT } else { 0 });
            self.ids[lane].push(w as u32);
        }
    }
}

/// Buffers a replay reuses across iterations, and how many lanes it may
/// run.
#[derive(Default)]
pub struct Scratch {
    lanes: Vec<LaneBuffers>,
    layout: Layout,
    split: bool,
}

impl Scratch {
    /// Buffers for replays that split large iterations between two cores.
    pub fn split() -> Self {
        Self {
            split: true,
            ..Self::default()
        }
    }
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
/// reusing `scratch`'s buffers, split between two lanes when the scratch
/// allows it, messages take time (nothing else crosses lanes) and there are
/// enough workers. Copies of a unit race across lanes without sharing
/// state: each copy's end is kept and the first settled when both lanes are
/// done (see [`super::replay::settle_races`]), so the outcome is the same
/// on one lane or two.
pub fn replay_iteration_with(
    scratch: &mut Scratch,
    lists: &Planned<'_>,
    agents: &mut [Option<PeerAgent>],
    latency_us: u64,
    planned: &[(u32, u32, ControlKind)],
) -> Replayed {
    let n = lists.workers();
    let splits = scratch.split && latency_us > 0 && n >= SPLIT_FROM;
    replay_lanes(
        scratch,
        lists,
        agents,
        latency_us,
        planned,
        if splits { 2 } else { 1 },
    )
}

/// The replay of `lanes` lanes side by side (see [`replay_iteration_with`]).
fn replay_lanes(
    scratch: &mut Scratch,
    lists: &Planned<'_>,
    agents: &mut [Option<PeerAgent>],
    latency_us: u64,
    planned: &[(u32, u32, ControlKind)],
    lanes: usize,
) -> Replayed {
    let n = lists.workers();
    scratch
        .lanes
        .resize_with(lanes.max(scratch.lanes.len()), Default::default);
    scratch.layout.lay_out(n, lanes);
    let layout = &scratch.layout;
    let units_total = (0..n).map(|w| lists.own(w).len()).sum();
    let mut held: [Vec<&mut Option<PeerAgent>>; 2] = Default::default();
    for (w, agent) in agents.iter_mut().enumerate() {
        held[usize::from(layout.slot[w] >= LANE_BIT)].push(agent);
    }
    let mut replays = Vec::with_capacity(lanes);
    for ((k, buffers), agents) in scratch.lanes.iter_mut().take(lanes).enumerate().zip(held) {
        let mut replay = lane(buffers, lists, agents, layout, k, latency_us);
        replay.units_total = units_total;
        replay.alone = lanes == 1;
        replays.push(replay);
    }
    if let [only] = replays.as_mut_slice() {
        only.start(lists, planned);
        only.run_until(u64::MAX);
    } else {
        run_in_windows(&mut replays, latency_us, lists, planned);
    }
    // Every lane's outcome added up (each worker's finish at its place
    // among all), the races settled last.
    let mut out = Replayed {
        iteration: lists.base.iteration,
        makespan_us: 0,
        finish_us: vec![0; n],
        executed: Vec::new(),
        reassigned: 0,
        wasted: 0,
        messages: 0,
    };
    let mut races = Vec::new();
    for (mut r, buffers) in replays.into_iter().zip(scratch.lanes.iter_mut()) {
        r.count_copies_left();
        let part = r.out;
        let mut lane_races = r.races;
        races.append(&mut lane_races);
        for (&w, &finish) in r.ids.iter().zip(&part.finish_us) {
            out.finish_us[w as usize] = finish;
        }
        out.makespan_us = out.makespan_us.max(part.makespan_us);
        if out.executed.is_empty() {
            out.executed = part.executed;
        } else {
            out.executed.extend(part.executed);
        }
        out.reassigned += part.reassigned;
        out.wasted += part.wasted;
        out.messages += part.messages;
        *buffers = LaneBuffers {
            workers: r.workers,
            units: r.units,
            events: r.events,
            in_flight: r.in_flight,
            fanouts: r.fanouts,
            crossed: r.crossed,
            messages: r.messages,
            carried: r.carried,
            flat: r.flat,
            races: lane_races,
            first_raced: r.first_raced,
            outbox: r.outbox,
        };
    }
    super::replay::settle_races(&mut out, &mut races);
    out
}

/// Lane `k` of `layout`, built from `buffers`.
fn lane<'a>(
    buffers: &mut LaneBuffers,
    lists: &Planned<'a>,
    agents: Vec<&'a mut Option<PeerAgent>>,
    layout: &'a Layout,
    k: usize,
    latency_us: u64,
) -> Replay<'a> {
    let ids = &layout.ids[k];
    let mut workers = std::mem::take(&mut buffers.workers);
    workers.resize_with(ids.len(), Worker::default);
    workers.truncate(ids.len());
    let clone_in_flight = agents
        .iter()
        .any(|a| a.as_ref().is_some_and(PeerAgent::copies_in_flight));
    let rest_in_flight = agents
        .iter()
        .any(|a| a.as_ref().is_some_and(PeerAgent::rests_in_flight));
    let tail_in_flight = agents
        .iter()
        .any(|a| a.as_ref().is_some_and(PeerAgent::tails_in_flight));
    Replay {
        clone_in_flight,
        rest_in_flight,
        tail_in_flight,
        timings: lists.base,
        clock: lists.clock,
        agents,
        ids,
        slot: &layout.slot,
        lane: k as u32,
        latency_us,
        workers,
        units: cleared(&mut buffers.units, BinaryHeap::clear),
        events: cleared(&mut buffers.events, BinaryHeap::clear),
        in_flight: cleared(&mut buffers.in_flight, super::fifo::Fifo::clear),
        fanouts: cleared(&mut buffers.fanouts, Vec::clear),
        crossed: cleared(&mut buffers.crossed, super::fifo::Fifo::clear),
        messages: cleared(&mut buffers.messages, Vec::clear),
        carried: cleared(&mut buffers.carried, Vec::clear),
        flat: cleared(&mut buffers.flat, Vec::clear),
        races: cleared(&mut buffers.races, Vec::clear),
        units_total: 0,
        plain_done: 0,
        tails_split: 0,
        first_raced: cleared(&mut buffers.first_raced, super::replay::FirstEnds::clear),
        alone: true,
        end_limit: u64::MAX,
        outbox: cleared(&mut buffers.outbox, Vec::clear),
        out: Replayed {
            iteration: lists.base.iteration,
            makespan_us: 0,
            finish_us: vec![0; ids.len()],
            executed: Vec::new(),
            reassigned: 0,
            wasted: 0,
            messages: 0,
        },
        broker_order: 0,
        broker_at: 0,
    }
}

/// Takes a buffer out of the scratch, emptied.
fn cleared<T: Default>(buffer: &mut T, clear: impl FnOnce(&mut T)) -> T {
    let mut taken = std::mem::take(buffer);
    clear(&mut taken);
    taken
}

/// Runs two lanes side by side, window by window, until neither has an event.
fn run_in_windows(
    replays: &mut [Replay<'_>],
    latency_us: u64,
    lists: &Planned<'_>,
    planned: &[(u32, u32, ControlKind)],
) {
    let heads = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];
    let mailboxes: [Mutex<Vec<Crossing>>; 2] = Default::default();
    let tallies: [Tally; 2] = Default::default();
    let barrier = SpinBarrier::default();
    let shared = Shared {
        heads: &heads,
        mailboxes: &mailboxes,
        tallies: &tallies,
        barrier: &barrier,
    };
    // The second lane on a thread of its own, the first on this one.
    let [first, second, ..] = replays else {
        return;
    };
    std::thread::scope(|scope| {
        scope.spawn(|| run_lane(1, second, shared, latency_us, lists, planned));
        run_lane(0, first, shared, latency_us, lists, planned);
    });
}

/// What the two lanes share.
#[derive(Clone, Copy)]
struct Shared<'s> {
    heads: &'s [AtomicU64; 2],
    mailboxes: &'s [Mutex<Vec<Crossing>>; 2],
    tallies: &'s [Tally; 2],
    barrier: &'s SpinBarrier,
}

/// Lane `k`'s part of [`run_in_windows`].
fn run_lane(
    k: usize,
    r: &mut Replay<'_>,
    shared: Shared<'_>,
    latency_us: u64,
    lists: &Planned<'_>,
    planned: &[(u32, u32, ControlKind)],
) {
    let Shared {
        heads,
        mailboxes,
        tallies,
        barrier,
    } = shared;
    r.start(lists, planned);
    let mut arrived: Vec<Crossing> = Vec::new();
    loop {
        heads[k].store(r.head().unwrap_or(u64::MAX), Ordering::SeqCst);
        barrier.wait();
        let earliest = heads[0]
            .load(Ordering::SeqCst)
            .min(heads[1].load(Ordering::SeqCst));
        // (the lanes set the iteration's end together)
        if earliest >= r.end_limit {
            break;
        }
        r.run_until(earliest.saturating_add(latency_us));
        if let Ok(mut m) = mailboxes[1 - k].lock() {
            m.append(&mut r.outbox);
        }
        tallies[k].count(r);
        barrier.wait();
        // The mailbox and this lane's spare swap buffers (a fresh one each
        // window is a large allocation, mapped and faulted in anew).
        if let Ok(mut m) = mailboxes[k].lock() {
            std::mem::swap(&mut *m, &mut arrived);
        }
        for c in arrived.drain(..) {
            r.accept(c);
        }
        if r.end_limit == u64::MAX && Tally::may_have_ended(tallies, r.units_total) {
            // Every unit may have a finished copy: which units finished is
            // settled from both lanes' first ends.
            tallies[k].publish(r);
            barrier.wait();
            if let Some(makespan) = Tally::ended(tallies, r.units_total) {
                r.end_at(makespan);
            }
            barrier.wait();
        }
    }
}

/// What a lane has finished, told the other at each exchange: whether
/// every unit of the iteration has a finished copy, and when the last one
/// first ended.
#[derive(Default)]
struct Tally {
    /// Units finished with no other copy, and raced units it finished a
    /// copy of (the sum over lanes counts a unit raced in both twice).
    plain: AtomicUsize,
    raced: AtomicUsize,
    /// Tails its workers handed over: parts to end besides the units.
    tails: AtomicUsize,
    /// Its latest plain unit's end and its raced units' first ends, once
    /// their sum may be all of them.
    published: Mutex<(u64, Vec<(UnitKey, u64)>)>,
}

impl Tally {
    fn count(&self, r: &Replay<'_>) {
        self.plain.store(r.plain_done, Ordering::SeqCst);
        self.tails.store(r.tails_split, Ordering::SeqCst);
        self.raced.store(r.first_raced.len(), Ordering::SeqCst);
    }

    /// Whether the lanes' counts could add up to `total` units.
    fn may_have_ended(tallies: &[Tally; 2], total: usize) -> bool {
        let sum: usize = tallies
            .iter()
            .map(|t| t.plain.load(Ordering::SeqCst) + t.raced.load(Ordering::SeqCst))
            .sum();
        let tails: usize = tallies.iter().map(|t| t.tails.load(Ordering::SeqCst)).sum();
        total > 0 && sum >= total + tails
    }

    fn publish(&self, r: &Replay<'_>) {
        if let Ok(mut p) = self.published.lock() {
            p.0 = r.out.makespan_us;
            p.1.clear();
            p.1.extend(r.first_raced.iter().map(|(&k, &t)| (k, t)));
        }
    }

    /// When the iteration's last unit first ended, if every unit of the
    /// `total` has ended (both lanes read the same).
    fn ended(tallies: &[Tally; 2], total: usize) -> Option<u64> {
        let mut makespan = 0;
        let mut raced: Vec<(UnitKey, u64)> = Vec::new();
        for t in tallies {
            let p = t.published.lock().ok()?;
            makespan = makespan.max(p.0);
            raced.extend_from_slice(&p.1);
        }
        raced.sort_unstable();
        raced.dedup_by_key(|r| r.0);
        let plain: usize = tallies.iter().map(|t| t.plain.load(Ordering::SeqCst)).sum();
        let tails: usize = tallies.iter().map(|t| t.tails.load(Ordering::SeqCst)).sum();
        (plain + raced.len() == total + tails)
            .then(|| raced.iter().map(|r| r.1).fold(makespan, u64::max))
    }
}

/// A barrier for the two lanes: a window is tens of microseconds of work, so
/// a lane spins for the other instead of sleeping, and yields its core after
/// a few microseconds: on a machine busy with other work the other lane may
/// be waiting for that core, and spinning on would keep it waiting.
#[derive(Default)]
struct SpinBarrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) == 1 {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            spins = spins.saturating_add(1);
            if spins < 1 << 10 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two lanes take alternate blocks; each worker's slot names its lane
    /// and its place among the lane's workers, which ascend; one lane holds
    /// every worker in place.
    #[test]
    fn lanes_hold_alternate_blocks_and_slots_find_each_worker() {
        let mut layout = Layout::default();
        let n = 5 * BLOCK + 3;
        layout.lay_out(n, 2);
        assert_eq!(layout.ids[0].len() + layout.ids[1].len(), n);
        assert_eq!(layout.ids[0].len(), 3 * BLOCK);
        for (lane, ids) in layout.ids.iter().enumerate() {
            assert!(ids.windows(2).all(|p| p[0] < p[1]));
            for (place, &w) in ids.iter().enumerate() {
                assert_eq!((w as usize / BLOCK) % 2, lane);
                let slot = layout.slot[w as usize];
                assert_eq!(slot >= LANE_BIT, lane == 1);
                assert_eq!((slot & !LANE_BIT) as usize, place);
            }
        }
        layout.lay_out(7, 1);
        assert_eq!(layout.ids[0], (0..7).collect::<Vec<u32>>());
        assert!(layout.ids[1].is_empty());
        assert_eq!(layout.slot, (0..7).collect::<Vec<u32>>());
    }
}
