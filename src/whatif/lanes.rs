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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::replay::{Crossing, Replay, Worker};
use super::{IterationTimings, Planned, Replayed, TimedUnit};
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
    cloned: super::replay::Keys,
    cloned_done: super::replay::Keys,
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
    /// Iterations of agents that copy units in flight still to replay on
    /// one lane before guessing again that none is copied, and how many
    /// the next wrong guess sets (doubling, from 1, up to [`MAX_WAIT`]).
    guess_in: u32,
    guess_wait: u32,
    /// Guesses that held and guesses that did not.
    guesses: (u32, u32),
}

/// The most iterations a replay waits after a wrong guess before guessing
/// again that no unit in flight is copied.
const MAX_WAIT: u32 = 64;

impl Scratch {
    /// Buffers for replays that split large iterations between two cores.
    pub fn split() -> Self {
        Self {
            split: true,
            ..Self::default()
        }
    }

    /// Whether to guess, for this iteration, that no unit in flight is
    /// copied.
    fn guess(&mut self) -> bool {
        if self.guess_in > 0 {
            self.guess_in -= 1;
            return false;
        }
        true
    }

    /// Guesses that held and guesses that did not, so far.
    #[cfg(test)]
    pub(super) fn guesses(&self) -> (u32, u32) {
        self.guesses
    }

    /// How the guess came out.
    fn guessed(&mut self, right: bool) {
        if right {
            self.guesses.0 += 1;
            self.guess_wait = 0;
        } else {
            self.guesses.1 += 1;
            self.guess_wait = (2 * self.guess_wait).clamp(1, MAX_WAIT);
            self.guess_in = self.guess_wait;
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
/// allows it and nothing crosses lanes but messages: a latency above zero, no
/// clones (their races share state), and enough workers.
///
/// Agents that copy a unit in flight only when it is late enough (under
/// `forestall`) seldom do where units come in micro-batches (the rest of a
/// unit moves instead): their iteration is split on the guess that none is
/// copied, with the agents kept as they were. The first copy stops both
/// lanes, and the iteration is replayed on one lane from the agents kept;
/// after a wrong guess the next iterations run on one lane for a while
/// (1, 2, 4, … up to [`MAX_WAIT`]). The outcome is the same either way.
pub fn replay_iteration_with(
    scratch: &mut Scratch,
    lists: &Planned<'_>,
    agents: &mut [Option<PeerAgent>],
    latency_us: u64,
    planned: &[(u32, u32, ControlKind)],
) -> Replayed {
    let n = lists.workers();
    let clones = !planned.is_empty()
        || agents
            .iter()
            .flatten()
            .any(|a| matches!(a, PeerAgent::Speculate(_)));
    let copies = agents.iter().flatten().any(PeerAgent::copies_in_flight);
    let splits = scratch.split && latency_us > 0 && !clones && n >= SPLIT_FROM;
    if splits && copies && scratch.guess() {
        let kept = agents.to_vec();
        if let Some(out) = replay_lanes(scratch, lists, agents, latency_us, planned, 2, true) {
            scratch.guessed(true);
            return out;
        }
        scratch.guessed(false);
        agents.clone_from_slice(&kept);
    }
    let lanes = if splits && !copies { 2 } else { 1 };
    replay_lanes(scratch, lists, agents, latency_us, planned, lanes, false)
        .expect("a replay that does not guess is never stopped")
}

/// The replay of `lanes` lanes side by side (see [`replay_iteration_with`]);
/// `None` when `guessing` that no unit in flight is copied and a lane would
/// have copied one.
fn replay_lanes(
    scratch: &mut Scratch,
    lists: &Planned<'_>,
    agents: &mut [Option<PeerAgent>],
    latency_us: u64,
    planned: &[(u32, u32, ControlKind)],
    lanes: usize,
    guessing: bool,
) -> Option<Replayed> {
    let n = lists.workers();
    scratch
        .lanes
        .resize_with(lanes.max(scratch.lanes.len()), Default::default);
    let cut = if lanes == 1 { n } else { scratch.cut(n) };
    let mut rest = agents;
    let mut replays = Vec::with_capacity(lanes);
    for (k, buffers) in scratch.lanes.iter_mut().take(lanes).enumerate() {
        let (lo, hi) = if k == 0 { (0, cut) } else { (cut, n) };
        let take = (hi - lo).min(rest.len());
        let (mine, others) = std::mem::take(&mut rest).split_at_mut(take);
        rest = others;
        let mut replay = lane(buffers, lists, mine, lo, hi, latency_us);
        replay.guessing = guessing;
        replays.push(replay);
    }
    let busy = if let [only] = replays.as_mut_slice() {
        only.start(lists, planned);
        only.run_until(u64::MAX);
        None
    } else {
        Some(run_in_windows(&mut replays, latency_us, lists))
    };
    let copied = replays.iter().any(|r| r.copied);
    if let (Some(busy), false) = (busy, copied) {
        scratch.learn([cut, n - cut], busy);
    }
    // The first lane's outcome, with the others' appended.
    let mut out: Option<Replayed> = None;
    for (r, buffers) in replays.into_iter().zip(scratch.lanes.iter_mut()) {
        let part = r.out;
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
            cloned: r.cloned,
            cloned_done: r.cloned_done,
            outbox: r.outbox,
        };
    }
    if copied {
        return None;
    }
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
        guessing: false,
        copied: false,
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
        cloned: cleared(&mut buffers.cloned, super::replay::Keys::clear),
        cloned_done: cleared(&mut buffers.cloned_done, super::replay::Keys::clear),
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
fn run_in_windows(replays: &mut [Replay<'_>], latency_us: u64, lists: &Planned<'_>) -> [u64; 2] {
    let busy = [AtomicU64::new(0), AtomicU64::new(0)];
    let heads = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];
    // A lane that would have copied a unit in flight (see `Replay::guessing`).
    let copied = AtomicBool::new(false);
    let mailboxes: [Mutex<Vec<Crossing>>; 2] = Default::default();
    let barrier = SpinBarrier::default();
    std::thread::scope(|scope| {
        for (k, r) in replays.iter_mut().enumerate().take(2) {
            let (heads, mailboxes, barrier, busy) = (&heads, &mailboxes, &barrier, &busy);
            let copied = &copied;
            scope.spawn(move || {
                let started = std::time::Instant::now();
                r.start(lists, &[]);
                let mut busy_ns = started.elapsed().as_nanos() as u64;
                let mut arrived: Vec<Crossing> = Vec::new();
                loop {
                    heads[k].store(r.head().unwrap_or(u64::MAX), Ordering::SeqCst);
                    // Read before the barrier: the other lane sets it only
                    // in a window both have entered, so both read the same.
                    let stop = copied.load(Ordering::SeqCst);
                    barrier.wait();
                    let earliest = heads[0]
                        .load(Ordering::SeqCst)
                        .min(heads[1].load(Ordering::SeqCst));
                    if earliest == u64::MAX || stop {
                        break;
                    }
                    let started = std::time::Instant::now();
                    r.run_until(earliest.saturating_add(latency_us));
                    busy_ns += started.elapsed().as_nanos() as u64;
                    if r.copied {
                        copied.store(true, Ordering::SeqCst);
                    }
                    if let Ok(mut m) = mailboxes[1 - k].lock() {
                        m.append(&mut r.outbox);
                    }
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
                }
                busy[k].store(busy_ns, Ordering::Relaxed);
            });
        }
    });
    busy.map(AtomicU64::into_inner)
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
