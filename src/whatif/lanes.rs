//! An iteration's replay, on one core or split between two.
//!
//! Split, each core runs a lane of the workers (the first half, the second),
//! in windows: every message takes the latency L, so nothing a lane does at
//! time t reaches the other before t + L, and with T the earliest pending
//! event of both, each lane can run every event before T + L on its own. Then
//! the lanes swap the messages they sent each other and begin the next window.
//! Ties between events are broken by the worker that caused them and its
//! count of events, so the outcome is the same to the bit on one lane or two.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::replay::{Crossing, Replay, Worker};
use super::{IterationTimings, Planned, Replayed, TimedUnit};
use crate::data::UnitKey;
use crate::policy::{ControlKind, PeerAgent};

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
    crossed: super::fifo::Fifo<super::replay::Local>,
    messages: Vec<Option<super::replay::Message>>,
    carried: Vec<TimedUnit>,
    flat: Vec<TimedUnit>,
    races: Vec<super::replay::Race>,
    first_raced: Vec<(UnitKey, u64)>,
    outbox: Vec<Crossing>,
}

/// Buffers a replay reuses across iterations, how many lanes it may run,
/// and where it cuts the workers between two.
#[derive(Default)]
pub struct Scratch {
    lanes: Vec<LaneBuffers>,
    split: bool,
    /// Share of the workers in the first lane (none measured yet: half).
    first_share: Option<f64>,
}

impl Scratch {
    /// Buffers for replays that split large iterations between two cores.
    pub fn split() -> Self {
        Self {
            split: true,
            ..Self::default()
        }
    }

    /// The first lane's share of `n` workers: half at first, then moved
    /// towards what evened out the lanes' busy times last time (worker 0's
    /// lane also runs the broker, say). Where the cut falls does not change
    /// the outcome, only how long the lanes wait for each other.
    fn cut(&self, n: usize) -> usize {
        let share = self.first_share.unwrap_or(0.5);
        ((n as f64 * share).round() as usize).clamp(1, n.saturating_sub(1).max(1))
    }

    /// Learns from an iteration whose lanes of `sizes` workers were busy
    /// `busy_ns` each.
    fn learn(&mut self, sizes: [usize; 2], busy_ns: [u64; 2]) {
        let per = |k: usize| busy_ns[k] as f64 / sizes[k].max(1) as f64;
        let (a, b) = (per(0), per(1));
        if a <= 0.0 || b <= 0.0 {
            return;
        }
        // Even lanes: n0 · a = n1 · b.
        let even = b / (a + b);
        let old = self.first_share.unwrap_or(0.5);
        self.first_share = Some((0.5 * old + 0.5 * even).clamp(0.25, 0.75));
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
    let cut = if lanes == 1 { n } else { scratch.cut(n) };
    let units_total = (0..n).map(|w| lists.own(w).len()).sum();
    let mut rest = agents;
    let mut replays = Vec::with_capacity(lanes);
    for (k, buffers) in scratch.lanes.iter_mut().take(lanes).enumerate() {
        let (lo, hi) = if k == 0 { (0, cut) } else { (cut, n) };
        let take = (hi - lo).min(rest.len());
        let (mine, others) = std::mem::take(&mut rest).split_at_mut(take);
        rest = others;
        let mut replay = lane(buffers, lists, mine, lo, hi, latency_us);
        replay.units_total = units_total;
        replay.alone = lanes == 1;
        replays.push(replay);
    }
    let busy = if let [only] = replays.as_mut_slice() {
        only.start(lists, planned);
        only.run_until(u64::MAX);
        None
    } else {
        Some(run_in_windows(&mut replays, latency_us, lists, planned))
    };
    if let Some(busy) = busy {
        scratch.learn([cut, n - cut], busy);
    }
    // The first lane's outcome, with the others' appended.
    let mut out: Option<Replayed> = None;
    let mut races = Vec::new();
    for (mut r, buffers) in replays.into_iter().zip(scratch.lanes.iter_mut()) {
        r.count_copies_left();
        let part = r.out;
        let mut lane_races = r.races;
        races.append(&mut lane_races);
        match out.as_mut() {
            None => out = Some(part),
            Some(out) => {
                out.makespan_us = out.makespan_us.max(part.makespan_us);
                out.finish_us.extend(part.finish_us);
                out.executed.extend(part.executed);
                out.reassigned += part.reassigned;
                out.wasted += part.wasted;
                out.messages += part.messages;
            }
        }
        *buffers = LaneBuffers {
            workers: r.workers,
            units: r.units,
            events: r.events,
            in_flight: r.in_flight,
            crossed: r.crossed,
            messages: r.messages,
            carried: r.carried,
            flat: r.flat,
            races: lane_races,
            first_raced: r.first_raced,
            outbox: r.outbox,
        };
    }
    let mut out = out.expect("at least one lane");
    super::replay::settle_races(&mut out, &mut races);
    out
}

/// The lane of workers `lo..hi`, built from `buffers`.
fn lane<'a>(
    buffers: &mut LaneBuffers,
    lists: &Planned<'a>,
    agents: &'a mut [Option<PeerAgent>],
    lo: usize,
    hi: usize,
    latency_us: u64,
) -> Replay<'a> {
    let mut workers = std::mem::take(&mut buffers.workers);
    workers.resize_with(hi - lo, Worker::default);
    workers.truncate(hi - lo);
    let clone_in_flight = agents.iter().flatten().any(PeerAgent::copies_in_flight);
    let rest_in_flight = agents.iter().flatten().any(PeerAgent::rests_in_flight);
    Replay {
        clone_in_flight,
        rest_in_flight,
        timings: lists.base,
        clock: lists.clock,
        agents,
        lo: lo as u32,
        latency_us,
        workers,
        units: cleared(&mut buffers.units, BinaryHeap::clear),
        events: cleared(&mut buffers.events, BinaryHeap::clear),
        in_flight: cleared(&mut buffers.in_flight, super::fifo::Fifo::clear),
        crossed: cleared(&mut buffers.crossed, super::fifo::Fifo::clear),
        messages: cleared(&mut buffers.messages, Vec::clear),
        carried: cleared(&mut buffers.carried, Vec::clear),
        flat: cleared(&mut buffers.flat, Vec::clear),
        races: cleared(&mut buffers.races, Vec::clear),
        units_total: 0,
        plain_done: 0,
        first_raced: cleared(&mut buffers.first_raced, Vec::clear),
        alone: true,
        end_limit: u64::MAX,
        outbox: cleared(&mut buffers.outbox, Vec::clear),
        out: Replayed {
            iteration: lists.base.iteration,
            makespan_us: 0,
            finish_us: vec![0; hi - lo],
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
/// Returns how long each was busy, ns.
fn run_in_windows(
    replays: &mut [Replay<'_>],
    latency_us: u64,
    lists: &Planned<'_>,
    planned: &[(u32, u32, ControlKind)],
) -> [u64; 2] {
    let busy = [AtomicU64::new(0), AtomicU64::new(0)];
    let heads = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];
    let mailboxes: [Mutex<Vec<Crossing>>; 2] = Default::default();
    let tallies: [Tally; 2] = Default::default();
    let barrier = SpinBarrier::default();
    std::thread::scope(|scope| {
        for (k, r) in replays.iter_mut().enumerate().take(2) {
            let (heads, mailboxes, barrier, busy) = (&heads, &mailboxes, &barrier, &busy);
            let tallies = &tallies;
            scope.spawn(move || {
                let started = std::time::Instant::now();
                r.start(lists, planned);
                let mut busy_ns = started.elapsed().as_nanos() as u64;
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
                    let started = std::time::Instant::now();
                    r.run_until(earliest.saturating_add(latency_us));
                    busy_ns += started.elapsed().as_nanos() as u64;
                    if let Ok(mut m) = mailboxes[1 - k].lock() {
                        m.append(&mut r.outbox);
                    }
                    tallies[k].count(r);
                    barrier.wait();
                    // The mailbox and this lane's spare swap buffers (a
                    // fresh one each window is a large allocation, mapped
                    // and faulted in anew).
                    if let Ok(mut m) = mailboxes[k].lock() {
                        std::mem::swap(&mut *m, &mut arrived);
                    }
                    for c in arrived.drain(..) {
                        r.accept(c);
                    }
                    if r.end_limit == u64::MAX && Tally::may_have_ended(tallies, r.units_total) {
                        // Every unit may have a finished copy: which units
                        // finished is settled from both lanes' first ends.
                        tallies[k].publish(r);
                        barrier.wait();
                        if let Some(makespan) = Tally::ended(tallies, r.units_total) {
                            r.end_at(makespan);
                        }
                        barrier.wait();
                    }
                }
                busy[k].store(busy_ns, Ordering::Relaxed);
            });
        }
    });
    busy.map(AtomicU64::into_inner)
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
    /// Its latest plain unit's end and its raced units' first ends, once
    /// their sum may be all of them.
    published: Mutex<(u64, Vec<(UnitKey, u64)>)>,
}

impl Tally {
    fn count(&self, r: &Replay<'_>) {
        self.plain.store(r.plain_done, Ordering::SeqCst);
        self.raced.store(r.first_raced.len(), Ordering::SeqCst);
    }

    /// Whether the lanes' counts could add up to `total` units.
    fn may_have_ended(tallies: &[Tally; 2], total: usize) -> bool {
        let sum: usize = tallies
            .iter()
            .map(|t| t.plain.load(Ordering::SeqCst) + t.raced.load(Ordering::SeqCst))
            .sum();
        total > 0 && sum >= total
    }

    fn publish(&self, r: &Replay<'_>) {
        if let Ok(mut p) = self.published.lock() {
            p.0 = r.out.makespan_us;
            p.1.clear();
            p.1.extend_from_slice(&r.first_raced);
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
        (plain + raced.len() == total).then(|| raced.iter().map(|r| r.1).fold(makespan, u64::max))
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
