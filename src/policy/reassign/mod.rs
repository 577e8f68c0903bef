//! FlexRR's RapidReassignment (Harlap et al., SoCC 2016), one worker's side.
//!
//! Every worker has a *helper group*: the next `group_size` workers in a ring
//! that starts in other processes. The protocol, all within one iteration:
//!
//! 1. A worker that has done `checkpoint` of its own units, and again when it has
//!    done all of them, sends a **progress report** to its group; under
//!    `forestall`'s broker also whenever its time per unit has grown
//!    [`SLOWED`]-fold since it last reported (a slowdown that begins after
//!    the checkpoint shows at once, not at its last unit).
//! 2. A worker that gets a report from a peer it expects to finish more than
//!    two of that peer's units after gives that peer units from the **end** of
//!    its list (**assign**): as many as make all expect to finish together,
//!    judged by each one's time per unit so far (its own: the mean of its units
//!    done, or the unit in flight's time so far when longer), at least
//!    `initial_units` when no other peer may be giving to it too — or, when
//!    it is only more loaded than the peer and not
//!    slower per unit, its part of that among the peers that may be giving
//!    too (under `forestall`'s broker, a slower one too, when others may be
//!    giving: its part of a balance with all its helpers). The units leave its list before the message is sent, so ownership
//!    moves once and no unit is done twice; they no longer count as the giver's
//!    own, so its reports (done of total) stay true.
//!    Under the broker, a worker that gets a report from a peer it expects
//!    to finish more than two of its own units *before* answers, once an
//!    iteration, with its own report, so the peer can give it units now
//!    rather than when it next reports or goes idle.
//! 3. A helper that has finished everything it holds **offers** help to the peer
//!    of its group whose last report shows it furthest behind; that peer answers
//!    with units from the end of its list (the same balance, at least
//!    `follow_up_units`), or **declines** when it has at most one left (none
//!    with a unit in flight) or the helper would finish a unit no sooner than
//!    it finishes everything, and the helper tries the next peer behind.
//!
//! A worker answers control messages at once, also while a unit is in flight
//! (`respond = "at-once"`, the default), or only between units. The agent is
//! pure: callers pass in what happened and send what it returns.

use std::collections::VecDeque;

pub use super::broker::Pace;
use super::broker::{Broker, SLOW_PACE};
use super::proactive::DEFAULT_MIN_GAIN;
pub use brokered::BROKERED_SLOWER;
pub use groups::{helper_group, reporters};
pub use kind::ControlKind;
pub use reporter::SLOWED;
pub(crate) use reporter::{Giver, Reporter};

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// A list about a worker's helper group, held inside its agent: a group is
/// small, and an agent's state in one place costs a replay of thousands of
/// agents far fewer cache misses than a heap block per list.
type Small<T> = SmallVec<[T; DEFAULT_GROUP_SIZE as usize]>;

/// Default helper-group size.
pub const DEFAULT_GROUP_SIZE: u32 = 8;
/// Default progress checkpoint (share of a worker's own units).
pub const DEFAULT_CHECKPOINT: f64 = 0.75;
/// Default size of a first reassignment.
pub const DEFAULT_INITIAL_UNITS: u32 = 2;
/// Salt of the random rounding of a loaded worker's part.
const GIFT_ROUNDING: u64 = 0x6769_6674;
/// Iterations of peers' progress an agent remembers.
const HISTORY: u64 = 4;

/// Default size of a follow-up reassignment.
pub const DEFAULT_FOLLOW_UP_UNITS: u32 = 1;

/// Knobs of rapid reassignment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReassignConfig {
    /// Peers a worker reports to and may help.
    pub group_size: u32,
    /// Share of its own units after which a worker reports progress.
    pub checkpoint: f64,
    /// Units given to a peer that reported being ahead.
    pub initial_units: u32,
    /// Units given in answer to a help offer.
    pub follow_up_units: u32,
    /// Every worker tells worker 0 its pace once per iteration and worker 0
    /// balances all of them at once (`forestall`; see [`super::broker`]).
    #[serde(default)]
    pub broker: bool,
}

impl Default for ReassignConfig {
    fn default() -> Self {
        Self {
            group_size: DEFAULT_GROUP_SIZE,
            checkpoint: DEFAULT_CHECKPOINT,
            initial_units: DEFAULT_INITIAL_UNITS,
            follow_up_units: DEFAULT_FOLLOW_UP_UNITS,
            broker: false,
        }
    }
}

/// Progress reports by peer: (peer, (done, total)), sorted by peer.
#[derive(Debug, Clone, Default)]
struct Peers(Small<(u32, (u32, u32))>);

impl Peers {
    fn new() -> Self {
        Self::default()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Records `peer`'s latest report.
    fn set(&mut self, peer: u32, report: (u32, u32)) {
        match self.0.binary_search_by_key(&peer, |&(w, _)| w) {
            Ok(i) => self.0[i].1 = report,
            Err(i) => self.0.insert(i, (peer, report)),
        }
    }
}

/// One worker's state of the protocol for the current iteration.
#[derive(Debug, Clone)]
pub struct ReassignAgent {
    me: u32,
    group: Small<u32>,
    config: ReassignConfig,
    progress: Reporter,
    /// Last progress each peer reported to us: (peer, (done, total)), by peer
    /// (a helper group is small: a sorted vector beats a map).
    peers: Peers,
    /// The iteration this worker is in.
    iteration: u64,
    /// Progress peers reported in earlier iterations that may still be open
    /// (SSP): (iteration, peers), oldest first.
    history: VecDeque<(u64, Peers)>,
    /// Whether earlier iterations may still be open (the policy has slack):
    /// otherwise nothing goes into `history`.
    remember: bool,
    /// The (iteration, peer) we offered help to and are waiting for.
    waiting_on: Option<(u64, u32)>,
    /// (iteration, peer) pairs that declined.
    declined: Vec<(u64, u32)>,
    /// Peers given units this iteration: the others may still ask, and
    /// share what is left.
    helped: Small<u32>,
    /// Peers whose last report this iteration was no faster per unit than
    /// this worker: they will not take its units.
    no_faster: Small<u32>,
    /// Each reporting peer's work left and time per unit at its last report
    /// this iteration, and this worker's clock when it came, µs: (peer,
    /// left, per unit, at).
    left_us: Small<(u32, u64, u64, u64)>,
    /// Peers we answered a report with our own this iteration.
    replied: Small<u32>,
    /// Worker 0's broker, when the policy has one.
    broker: Option<Box<Broker>>,
    /// Whether this worker told the broker its pace this iteration.
    paced: bool,
    /// Its time per unit in its first pace this iteration, µs (0: not
    /// sent yet).
    paced_us: u64,
    /// Whether it passed units on to the peer it thought freest this
    /// iteration ([`ReassignAgent::freest_peer`]).
    forwarded: bool,
    /// The worker's clock at the last `observe`, µs.
    now_us: u64,
    /// Its clock when the iteration began (the last `observe` before
    /// `begin`), µs.
    started_us: u64,
    /// Its mean time per own unit in the iteration before, µs (0: none).
    usual_us: u64,
    /// Whether an idle worker also offers help to peers it has not heard
    /// from this iteration (a peer whose one unit is slowed in flight never
    /// reports; it may answer with a copy of that unit).
    offer_silent: bool,
    /// Whether its worker hands over the rest of a unit in flight
    /// ([`Self::with_rests`]).
    rests: bool,
    /// Whether its worker hands over the tail of a unit in flight
    /// ([`Self::with_tails`]).
    tails: bool,
    /// The peers that report to it ([`reporters`]), when it offers help to
    /// silent ones ([`Self::with_silent_offers`]).
    reporters: Small<u32>,
    /// Those of them whose last report this iteration had units queued
    /// ahead of their list (handed to them): done with their own list,
    /// they may still have units to pass on.
    holding: Small<u32>,
}

impl ReassignAgent {
    /// The agent of worker `me` with helper group `group`.
    pub fn new(me: u32, group: Vec<u32>, config: ReassignConfig) -> Self {
        Self {
            broker: None,
            paced: false,
            paced_us: 0,
            forwarded: false,
            now_us: 0,
            started_us: 0,
            usual_us: 0,
            offer_silent: false,
            rests: false,
            tails: false,
            reporters: Small::new(),
            holding: Small::new(),
            me,
            group: group.into(),
            config,
            progress: Reporter::default(),
            peers: Peers::new(),
            iteration: 0,
            history: VecDeque::new(),
            remember: true,
            waiting_on: None,
            declined: Vec::new(),
            helped: Small::new(),
            no_faster: Small::new(),
            left_us: Small::new(),
            replied: Small::new(),
        }
    }

    /// The same agent, and worker 0's broker among `workers` workers when
    /// the policy has one.
    pub fn with_broker(mut self, workers: u32) -> Self {
        if self.config.broker && self.me == 0 {
            self.broker = Some(Box::new(Broker::new(workers, DEFAULT_MIN_GAIN)));
        }
        self
    }

    /// The same agent, offering help to silent peers too when `on` (the
    /// policy copies units in flight): to those of `reporters` (the peers
    /// whose group holds it, see [`reporters`]) it has not heard from. (Its
    /// own group reports to others: with groups of the next workers in a
    /// ring, none of them ever reports to it, and every one looked silent,
    /// so an idle worker offered help to all of them in turn, most of a
    /// what-if replay's messages at 1,000 workers.)
    pub fn with_silent_offers(mut self, on: bool, reporters: Vec<u32>) -> Self {
        self.offer_silent = on;
        self.reporters = reporters.into();
        self
    }

    /// The same agent, its worker handing over the rest of a unit in flight
    /// between micro-batches when `on` (the policy does).
    pub fn with_rests(mut self, on: bool) -> Self {
        self.rests = on;
        self
    }

    /// Its worker hands over the tail of its unit in flight to a peer
    /// offering help ([`handover::tail_in_flight`](crate::policy::handover::tail_in_flight)).
    pub fn with_tails(mut self, on: bool) -> Self {
        self.tails = on;
        self
    }

    /// Whether its worker hands over the tail of a unit in flight
    /// ([`Self::with_tails`]).
    pub fn hands_over_tails(&self) -> bool {
        self.tails
    }

    /// Its worker began an own unit of `micro_batches` micro-batches (the
    /// whole unit, not a piece of one): when units may be cut (tails, more
    /// than two micro-batches), worker 0's broker balances micro-batches
    /// (see [`Broker::micro`]; the jobs of a run, and the units of a
    /// replayed trace, have as many micro-batches everywhere).
    pub fn set_micro_batches(&mut self, micro_batches: u32) {
        let micro = if self.tails && micro_batches > 2 {
            micro_batches
        } else {
            1
        };
        if let Some(broker) = self.broker.as_mut() {
            broker.micro = micro;
        }
    }

    /// Whether its worker hands over the rest of a unit in flight
    /// ([`Self::with_rests`]).
    pub fn hands_over_rests(&self) -> bool {
        self.rests
    }

    /// Whether it offers help to silent peers too ([`Self::with_silent_offers`]).
    pub fn offers_to_silent_peers(&self) -> bool {
        self.offer_silent
    }

    /// Whether this agent is worker 0's with a broker (it wants
    /// [`ReassignAgent::expect_lists`]).
    pub fn brokers(&self) -> bool {
        self.broker.is_some()
    }

    /// Every worker's units at the start of the iteration begun last (call
    /// after [`ReassignAgent::begin`]): the broker's view of a worker it has
    /// not heard from (see [`Broker::expect`]).
    pub fn expect_lists(&mut self, lists: Vec<u32>) {
        if let Some(broker) = self.broker.as_mut() {
            broker.expect(lists);
        }
    }

    /// The same agent, told whether the policy lets iterations overlap
    /// (slack above 0): only then does it keep peers' reports about the
    /// iterations it has left (by default it does).
    pub fn with_slack(mut self, slack: u64) -> Self {
        self.remember = slack > 0;
        self
    }

    /// Starts `iteration`, in which this worker owns `own_total` units. What
    /// peers reported about earlier iterations is kept a while: under SSP a
    /// worker may help with an iteration it has already left.
    pub fn begin(&mut self, iteration: u64, own_total: u32) {
        let keep_from = iteration.saturating_sub(HISTORY);
        while self.history.front().is_some_and(|&(t, _)| t < keep_from) {
            self.history.pop_front();
        }
        let previous = std::mem::take(&mut self.peers);
        if self.remember && !previous.is_empty() && self.iteration >= keep_from {
            let at = self.history.partition_point(|&(t, _)| t < self.iteration);
            self.history.insert(at, (self.iteration, previous));
        }
        if self.remember {
            self.declined.retain(|&(t, _)| t >= keep_from);
        } else {
            // Without slack every decline, and every offer still unanswered,
            // was about the iteration left.
            self.declined.clear();
            self.waiting_on = None;
        }
        self.helped.clear();
        self.no_faster.clear();
        self.left_us.clear();
        self.replied.clear();
        self.holding.clear();
        self.iteration = iteration;
        if self.progress.own_done > 0 {
            self.usual_us = self.progress.unit_us;
        }
        self.progress.begin(own_total);
        self.paced = false;
        self.paced_us = 0;
        self.forwarded = false;
        self.started_us = self.now_us;
        if let Some(broker) = self.broker.as_mut() {
            broker.begin(self.now_us);
        }
    }

    pub(crate) fn fraction(done: u32, total: u32) -> f64 {
        if total == 0 {
            1.0
        } else {
            f64::from(done) / f64::from(total)
        }
    }

    /// Units to give a peer with `their_left` units left at `their_unit_us` per
    /// unit, when `giver` has `helpers` peers like it that may help: as many
    /// as make all of us finish together if each helper took the same share,
    /// at least `floor`; the giver keeps one unless it has one in flight.
    ///
    /// With `T` the common finish time, the giver finishes the unit in flight
    /// (`rem` from now) and then `(T - rem) / mine` units, each helper
    /// `T / theirs - their_left` more, and all of it adds up to `left`:
    /// `T = (left + helpers · their_left + rem / mine) / (1 / mine + helpers / theirs)`.
    /// The giver keeps what it finishes by `T` (rounded) and the helpers share
    /// the rest, rounded up: a slow worker's unit left over costs more than a
    /// helper's.
    pub(crate) fn balance(
        giver: Giver,
        helpers: usize,
        their_left: u32,
        their_unit_us: u64,
        floor: u32,
    ) -> u32 {
        let keep_least = giver.keep_least();
        if giver.left <= keep_least {
            return 0;
        }
        let mine = giver.unit_us.max(1) as f64;
        let theirs = their_unit_us.max(1) as f64;
        let rem = giver.ahead_us.unwrap_or(0) as f64;
        let g = helpers.max(1) as f64;
        let n = giver.left as f64;
        let finish = (n + g * f64::from(their_left) + rem / mine) / (1.0 / mine + g / theirs);
        let keep = ((finish - rem) / mine).floor().clamp(keep_least as f64, n);
        let share = ((n - keep) / g).ceil();
        (share.max(f64::from(floor)) as usize).min(giver.left - keep_least) as u32
    }

    /// This worker's part of a peer's load when it is one of `givers`
    /// workers like it that may give to that peer (`their_left` units left at
    /// `their_unit_us`) and that peer one of `helpers` like it that may take
    /// from this worker: what a fluid balance of the givers and the helpers
    /// takes off it, `n − (T − rem) / mine` with
    /// `T = (givers · (n + rem / mine) + helpers · their_left) / (givers / mine + helpers / theirs)`,
    /// shared among the helpers and rounded at random (a hash of the
    /// iteration and the pair, so a run and its replay agree): from all its
    /// givers together the peer gets about what it can do by `T`, not a
    /// unit from each; within what may be given.
    fn part(
        &self,
        me: Giver,
        givers: u32,
        helpers: usize,
        their_left: u32,
        their_unit_us: u64,
        to: u32,
    ) -> u32 {
        // Units queued ahead are counted at the time per unit measured so
        // far, which early in an iteration is one noisy unit: a peer slower
        // than us gets none of our list on their account.
        let me = if their_unit_us > me.unit_us {
            self.progress.giver_unqueued(me.left)
        } else {
            me
        };
        let most = me.left.saturating_sub(me.keep_least());
        let mine = me.unit_us.max(1) as f64;
        let theirs = their_unit_us.max(1) as f64;
        let rem = me.ahead_us.unwrap_or(0) as f64;
        let g = f64::from(givers.max(1));
        let h = helpers.max(1) as f64;
        let n = me.left as f64;
        let finish = (g * (n + rem / mine) + h * f64::from(their_left)) / (g / mine + h / theirs);
        let part = (n - (finish - rem) / mine).max(0.0) / h;
        let u = crate::rng::uniform(&[
            GIFT_ROUNDING,
            self.iteration,
            u64::from(self.me),
            u64::from(to),
        ]);
        ((part + u).floor() as usize).min(most) as u32
    }

    /// Call when one of this worker's *own* units is done; `unit_us` is its mean
    /// time per unit so far. Returns the progress reports to send (at the
    /// checkpoint and at the end).
    pub fn on_own_unit_done(&mut self, unit_us: u64) -> Vec<(u32, ControlKind)> {
        let mut out = self.progress.unit_done(
            unit_us,
            self.config.checkpoint,
            self.config.broker,
            &self.group,
        );
        let left = self.progress.listed as u32;
        let paced = self.pace(left, unit_us, false);
        if !paced.is_empty() {
            self.account(&paced);
            out.extend(paced);
        }
        out
    }

    /// What the worker is doing now (call before every other call of an
    /// iteration): how long the unit in flight has run, if one is, how many
    /// units wait ahead of its own list, how many are in the list, and its
    /// clock, µs. Until the unit ends, its time per unit is taken to be at
    /// least that; with either a unit in flight or units ahead, it may give
    /// away every unit of its list, and it expects to start on its list only
    /// after them.
    pub fn observe(&mut self, running_us: Option<u64>, queued: usize, listed: usize, now_us: u64) {
        self.progress.running_us = running_us;
        self.progress.queued = queued;
        self.progress.listed = listed;
        self.now_us = now_us;
    }

    /// Call for every control message. `left` is how many units are still in
    /// this worker's list (not counting one being computed). Returns the messages
    /// to send; an `Assign { count }` means: take `count` units from the end of
    /// the list and send them to that peer (they no longer count as this
    /// worker's own).
    pub fn on_message(
        &mut self,
        from: u32,
        kind: &ControlKind,
        left: usize,
    ) -> Vec<(u32, ControlKind)> {
        let out = self.answer(from, kind, left);
        self.account(&out);
        out
    }

    /// Its worker handed `to` one of its own units (or the first part left
    /// of one) whole while it carried out a [`ControlKind::Cut`]: the unit
    /// no longer counts as its own, as with an assignment.
    pub fn handed_own(&mut self, to: u32) {
        self.account(&[(to, ControlKind::Assign { count: 1 })]);
    }

    /// Units this worker gives away (`out`'s assignments) leave its own.
    fn account(&mut self, out: &[(u32, ControlKind)]) {
        for (to, sent) in out {
            if let ControlKind::Assign { count } = sent {
                self.progress.own_total -= count;
                if !self.helped.contains(to) {
                    self.helped.push(*to);
                }
            }
        }
    }

    /// Peers that may still take units (the group less those given some
    /// already and those idle and no faster), at least 1: for the worker
    /// passing on units queued with it (`handover::report_taker`).
    pub fn takers(&self) -> u32 {
        self.helpers_left() as u32
    }

    /// Peers that may still take units: the group size less those given
    /// some already and those no faster than this worker (at least one, the
    /// one asking).
    fn helpers_left(&self) -> usize {
        let idle = self.no_faster.iter().filter(|w| !self.helped.contains(w));
        (self
            .group
            .len()
            .saturating_sub(self.helped.len() + idle.count()))
        .max(1)
    }

    /// How many workers may answer `reporter`'s report with units: this one,
    /// every peer that reported well more work left than `reporter` has
    /// (`their_left_us`, two of its units more), and every peer of the group
    /// not heard from yet this iteration. Each gives its part, so a peer that
    /// is ahead is not buried under everyone's units at once; the rest it
    /// gets by offering help when idle, one peer at a time.
    fn givers(&self, reporter: u32, their_left_us: u64, their_unit_us: u64) -> u32 {
        let behind = self
            .left_us
            .iter()
            .filter(|&&(w, l, _, _)| w != reporter && l > their_left_us + 2 * their_unit_us)
            .count();
        let unheard = self
            .group
            .iter()
            .filter(|&&w| w != reporter && !self.left_us.iter().any(|e| e.0 == w))
            .count();
        1 + (behind + unheard) as u32
    }

    /// How many units of our list (`left` of them) to give a peer with
    /// `their_left` units left at `their_unit_us` per unit, if any: only
    /// when we expect to finish after them by more than two of their units
    /// (a peer a unit ahead, timer noise, is no reason to move any, and
    /// moves between near-equals make work churn).
    fn gift(&self, to: u32, their_left: u32, their_unit_us: u64, left: usize) -> Option<u32> {
        let me = self.progress.giver(left);
        let theirs = u64::from(their_left) * their_unit_us;
        if me.remaining_us().saturating_sub(theirs) <= 2 * their_unit_us {
            return None;
        }
        if self.config.broker && self.slowed_peer(their_unit_us) {
            return None;
        }
        if self.brokered_straggler(me.unit_us, their_unit_us) {
            return None;
        }
        let share = Self::balance(me, self.helpers_left(), their_left, their_unit_us, 0);
        if share == 0 {
            return None;
        }
        // Our part; alone, at least `initial_units` (see below); within what
        // may be given.
        let most = (left - me.keep_least()) as u32;
        // A worker clearly slower per unit is a straggler its peers are not:
        // it gives its whole share. One that is only more loaded (a plan gone
        // stale, uneven units) may be one of many: it gives its part. Under
        // the broker, which places a straggler's share over all workers, a
        // straggler that may be one of several givers to this peer gives its
        // part too, of a balance with all its helpers: several stragglers of
        // one neighbourhood each giving their whole share to the first peer
        // to report bury it.
        let straggler = 2 * me.unit_us > 3 * their_unit_us;
        let givers = self.givers(to, theirs, their_unit_us);
        let count = if straggler && (givers <= 1 || !self.config.broker) {
            // At least `initial_units` only as the one giver: workers slow
            // for good each giving that many to the first peer to report
            // buried it (the what-if replay of half the workers 2× slow in
            // every iteration, 4 units each, W = 8: `rapid-reassign` 2.1×
            // the fluid bound, `bsp` 1.6×; 1.4× since).
            let floor = if givers <= 1 {
                self.config.initial_units
            } else {
                1
            };
            share.max(floor)
        } else {
            let helpers = if straggler { self.helpers_left() } else { 1 };
            self.part(me, givers, helpers, their_left, their_unit_us, to)
        };
        (count > 0).then_some(count.min(most))
    }

    /// Whether a peer at `unit_us` per unit is itself slowed: over
    /// [`SLOW_PACE`] times the (lower) median pace of the peers that
    /// reported this iteration (three at least). Units handed to it cannot
    /// be handed on, so under the broker nobody gives it any: two workers of
    /// a disrupted machine would otherwise balance with each other and lock
    /// units on the slow machine that fast peers were about to take.
    fn slowed_peer(&self, unit_us: u64) -> bool {
        let mut paces: Small<u64> = self
            .left_us
            .iter()
            .map(|e| e.2)
            .filter(|&t| t > 0)
            .collect();
        if paces.len() < 3 {
            return false;
        }
        paces.sort_unstable();
        let median = paces[(paces.len() - 1) / 2];
        unit_us as f64 > SLOW_PACE * median as f64
    }

    /// Under the broker, our own progress to a peer whose report shows it
    /// expects to finish well after us (by more than two of our units),
    /// once an iteration: its next report may be its last, and a slowdown
    /// that began after our report at the mark would otherwise be met only
    /// when we go idle; with ours in hand it gives us our part now.
    fn reply_report(
        &mut self,
        to: u32,
        their_left_us: u64,
        left: usize,
    ) -> Vec<(u32, ControlKind)> {
        if !self.config.broker || self.replied.contains(&to) {
            return Vec::new();
        }
        let me = self.progress.giver(left);
        if me.unit_us == 0 || their_left_us.saturating_sub(me.remaining_us()) <= 2 * me.unit_us {
            return Vec::new();
        }
        self.replied.push(to);
        vec![(to, self.progress.report(me.unit_us))]
    }

    fn answer(&mut self, from: u32, kind: &ControlKind, left: usize) -> Vec<(u32, ControlKind)> {
        match *kind {
            ControlKind::Progress {
                done,
                total,
                queued,
                unit_us,
            } => {
                self.peers.set(from, (done, total));
                let holding = self.holding.iter().position(|&w| w == from);
                match (queued > 0, holding) {
                    (true, None) => self.holding.push(from),
                    (false, Some(i)) => {
                        self.holding.swap_remove(i);
                    }
                    _ => {}
                }
                // Its work left: its own list and the units queued ahead.
                let their_left = (total - done).saturating_add(queued);
                let me = self.progress.giver(left);
                let no_faster = self.no_faster.iter().position(|&w| w == from);
                match (unit_us >= me.unit_us && me.unit_us > 0, no_faster) {
                    (true, None) => self.no_faster.push(from),
                    (false, Some(i)) => {
                        self.no_faster.swap_remove(i);
                    }
                    _ => {}
                }
                let theirs = u64::from(their_left) * unit_us;
                let at = self.now_us;
                match self.left_us.iter_mut().find(|e| e.0 == from) {
                    Some(e) => *e = (from, theirs, unit_us, at),
                    None => self.left_us.push((from, theirs, unit_us, at)),
                }
                if let Some(count) = self.gift(from, their_left, unit_us, left) {
                    return vec![(from, ControlKind::Assign { count })];
                }
                self.reply_report(from, theirs, left)
            }
            ControlKind::Offer { unit_us } => {
                let me = self.progress.giver(left);
                // A unit helps only if they finish it before we finish all.
                let count = if unit_us >= me.remaining_us() {
                    0
                } else if 2 * me.unit_us > 3 * unit_us {
                    // A straggler asked by a faster peer: its share.
                    Self::balance(
                        me,
                        self.helpers_left(),
                        0,
                        unit_us,
                        self.config.follow_up_units,
                    )
                } else {
                    // A peer no faster than us may be asking the others too.
                    let givers = self.givers(from, 0, unit_us);
                    self.part(me, givers, 1, 0, unit_us, from)
                };
                if count > 0 {
                    vec![(from, ControlKind::Assign { count })]
                } else {
                    vec![(from, ControlKind::Decline)]
                }
            }
            ControlKind::Assign { .. } => {
                // Units a peer of the group handed over after the pace: the
                // broker should know (the ones it ordered, it knows).
                let peer =
                    self.group.contains(&from) || self.waiting_on.is_some_and(|w| w.1 == from);
                self.on_reply(self.iteration, from, kind);
                if !peer {
                    return Vec::new();
                }
                let unit_us = self.progress.unit_us;
                self.pace(left as u32, unit_us, true)
            }
            ControlKind::Decline => {
                self.on_reply(self.iteration, from, kind);
                Vec::new()
            }
            ControlKind::Pace(pace) => self.brokered(from, pace, left),
            ControlKind::Give { to, count, cut } => {
                // What the broker saw is a message old: give what is left,
                // keeping one unless another is in flight or queued; the
                // tail of the last one left, if one is.
                if to == self.me {
                    return Vec::new();
                }
                let most = left.saturating_sub(self.progress.giver(left).keep_least()) as u32;
                let count = count.min(most);
                let mut out = Vec::new();
                if count > 0 {
                    out.push((to, ControlKind::Assign { count }));
                }
                // (from the list, or the unit in flight when the list
                // runs out)
                if cut > 0 {
                    out.push((to, ControlKind::Cut { count: cut }));
                }
                out
            }
            ControlKind::Clone { .. } | ControlKind::Rest { .. } | ControlKind::Tail { .. } => {
                // A copy of a unit in flight, its rest or its tail may answer
                // an offer.
                self.on_reply(self.iteration, from, kind);
                Vec::new()
            }
            ControlKind::Done
            | ControlKind::Cut { .. }
            | ControlKind::Planned { .. }
            | ControlKind::Timing { .. }
            | ControlKind::Timings { .. } => Vec::new(),
        }
    }

    /// A peer's report about an earlier iteration this worker has left.
    pub fn note_progress(&mut self, iteration: u64, from: u32, done: u32, total: u32) {
        if iteration < self.iteration {
            let at = self.history.partition_point(|&(t, _)| t < iteration);
            if self.history.get(at).is_none_or(|&(t, _)| t != iteration) {
                self.history.insert(at, (iteration, Peers::new()));
            }
            if let Some((_, peers)) = self.history.get_mut(at) {
                peers.set(from, (done, total));
            }
        }
    }

    /// A peer answered an offer for `iteration` (with units or a decline).
    pub fn on_reply(&mut self, iteration: u64, from: u32, kind: &ControlKind) {
        if self.waiting_on == Some((iteration, from)) {
            self.waiting_on = None;
        }
        if let ControlKind::Decline = kind {
            self.declined.push((iteration, from));
        }
    }

    /// Call when this worker has nothing left to compute; `unit_us` is its mean
    /// time per unit so far and `oldest_open` the oldest iteration not yet
    /// reduced. Offers help to the peer furthest behind in the oldest open
    /// iteration it has heard of (under BSP: the current one), unless that peer
    /// declined; at most one offer is outstanding. Returns (peer, iteration,
    /// offer).
    pub fn on_idle(&mut self, unit_us: u64, oldest_open: u64) -> Vec<(u32, u64, ControlKind)> {
        // Nothing to help with when the current iteration is already reduced
        // (the worker is waiting to begin the next one).
        if oldest_open > self.iteration {
            return Vec::new();
        }
        // Idle before its first own unit: the broker hears it all the same.
        let iteration = self.iteration;
        let mut out: Vec<(u32, u64, ControlKind)> = self
            .pace(0, unit_us, false)
            .into_iter()
            .map(|(to, kind)| (to, iteration, kind))
            .collect();
        // An offer about an iteration already reduced gets no answer that
        // counts: it must not keep this worker from offering again.
        if self.waiting_on.is_some_and(|(t, _)| t < oldest_open) {
            self.waiting_on = None;
        }
        if self.waiting_on.is_some() {
            return out;
        }
        // Under the broker a peer re-reports when it slows down, so its last
        // report this iteration says when it expects to be done: one done
        // before this worker could finish a unit of its would decline (a
        // tail of its unit in flight would gain too little: counting a peer
        // busy down to two micro-batches cost 0.06× the bound with 4 units a
        // worker at 1,000 workers).
        let busy =
            |w: u32| {
                !self.config.broker
                    || self.left_us.iter().find(|e| e.0 == w).is_none_or(|e| {
                        e.1.saturating_sub(self.now_us.saturating_sub(e.3)) > unit_us
                    })
            };
        let current = std::iter::once((self.iteration, &self.peers));
        let earlier = self
            .history
            .iter()
            .filter(|&&(t, _)| t >= oldest_open && t < self.iteration)
            .map(|(t, peers)| (*t, peers));
        let behind = earlier.chain(current).find_map(|(t, peers)| {
            peers
                .0
                .iter()
                .filter(|&&(w, (done, total))| {
                    done < total
                        && !self.declined.contains(&(t, w))
                        && w != self.me
                        && (t < self.iteration || busy(w))
                })
                .min_by(|a, b| {
                    let fa = Self::fraction(a.1 .0, a.1 .1);
                    let fb = Self::fraction(b.1 .0, b.1 .1);
                    fa.total_cmp(&fb).then(a.0.cmp(&b.0))
                })
                .map(|&(w, _)| (t, w))
        });
        // Last, when the policy copies units in flight: a peer this worker
        // handed units to (slowed in turn, it may be computing one of them,
        // or have them queued: a unit handed over is not final), then a peer
        // that reports to it not heard from this iteration, then one whose
        // last report had units queued (done with its own list, it may hold
        // units others handed it).
        let behind = behind.or_else(|| {
            let t = self.iteration;
            let open = |w: &u32| *w != self.me && !self.declined.contains(&(t, *w));
            let silent = |w: &u32| !self.peers.0.iter().any(|&(p, _)| p == *w);
            self.offer_silent
                .then(|| {
                    let handed = self.helped.iter().copied().find(open);
                    handed
                        .or_else(|| {
                            self.reporters
                                .iter()
                                .copied()
                                .find(|w| open(w) && silent(w))
                        })
                        .or_else(|| self.holding.iter().copied().find(|&w| open(&w) && busy(w)))
                })
                .flatten()
                .map(|w| (t, w))
        });
        if let Some((t, w)) = behind {
            self.waiting_on = Some((t, w));
            out.push((w, t, ControlKind::Offer { unit_us }));
        }
        out
    }
}

mod brokered;
mod groups;
mod kind;
mod passing;
mod reporter;
#[cfg(test)]
mod tests;
