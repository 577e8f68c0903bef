//! Prediction inside a run: every worker's timing of every iteration arrives
//! (broadcast when it first goes idle), and once an iteration has all of them
//! it becomes one step of each worker's history, normalised exactly as
//! [`super::worker_series`] normalises a recorded trace. The barrier wait is
//! the time to the slowest worker's busy time, as in the importers.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::auto::Scoreboard;
use super::{CalibratedLstm, Calibration, Ewma, Last, Predictor, Step, Sustained};

/// Steps of history kept per worker (the predictors read the recent past).
pub const KEPT_STEPS: usize = 64;

/// A plan acts on a worker's predicted slowdown only once it has lasted this
/// many iterations...
const LASTING_RUN: usize = 2;
/// ...and only if, of the times the worker's slowdowns had lasted that long
/// before (at least `LASTING_SEEN` of them), at least `LASTING_SHARE` went on
/// for another iteration.
const LASTING_SEEN: usize = 2;
const LASTING_SHARE: f64 = 2.0 / 3.0;

/// The predictor a run uses online.
#[derive(Debug, Clone)]
pub enum OnlinePredictor {
    /// Hold the last ratio.
    Last,
    /// Exponentially weighted moving average.
    Ewma(Ewma),
    /// The smallest ratio of the last k iterations.
    Sustained(Sustained),
    /// The median ratio of the last iterations.
    Median(super::Median),
    /// A trained LSTM, with its online gain.
    Lstm(CalibratedLstm),
    /// Whichever candidate has had the lowest recent error.
    Auto(super::Auto),
}

impl OnlinePredictor {
    /// As a [`Predictor`].
    pub fn as_predictor(&self) -> &dyn Predictor {
        match self {
            OnlinePredictor::Last => &Last,
            OnlinePredictor::Ewma(e) => e,
            OnlinePredictor::Sustained(s) => s,
            OnlinePredictor::Median(m) => m,
            OnlinePredictor::Lstm(l) => l,
            OnlinePredictor::Auto(a) => a,
        }
    }
}

/// One worker's timing of one iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Units it computed.
    pub units: u32,
    /// Time from its start of the iteration to its last unit's end, µs.
    pub busy_us: u64,
}

/// The last [`KEPT_STEPS`] steps of a series: all a predictor sees.
fn kept(steps: &[Step]) -> &[Step] {
    &steps[steps.len().saturating_sub(KEPT_STEPS)..]
}

/// Steps per worker a judge keeps (`auto`'s window and the LSTM's gain's).
const JUDGED_STEPS: usize = super::auto::WINDOW;
const _: () = assert!(JUDGED_STEPS == super::lstm::calibrate::WINDOW);

/// A predictor's judgement of its own past, kept as steps join.
#[derive(Debug, Clone)]
enum Judge {
    Auto(Scoreboard),
    Lstm(Calibration),
}

impl Judge {
    fn observe(&mut self, worker: usize, before: &[Step], step: &Step) {
        match self {
            Judge::Auto(board) => board.score(worker, before, step),
            Judge::Lstm(calibration) => calibration.observe(worker, before, step),
        }
    }

    fn through(&self, iteration: u64) -> Self {
        match self {
            Judge::Auto(board) => Judge::Auto(board.through(iteration)),
            Judge::Lstm(calibration) => Judge::Lstm(calibration.through(iteration)),
        }
    }
}

/// The histories of all workers of a run, as timings arrive.
#[derive(Debug, Clone)]
pub struct OnlineHistory {
    workers: usize,
    /// Iterations not yet complete: how many workers reported, and what.
    pending: BTreeMap<u64, (usize, Vec<Option<Timing>>)>,
    series: Vec<Vec<Step>>,
    /// Iterations complete so far (all workers' timings in), in order.
    complete_through: Option<u64>,
    /// `auto`'s scores or the LSTM's evidence of its gain, of every step
    /// as it joined, if kept.
    judge: Option<Judge>,
}

impl OnlineHistory {
    /// Empty histories of `workers` workers.
    pub fn new(workers: u32) -> Self {
        Self {
            workers: workers as usize,
            pending: BTreeMap::new(),
            series: vec![Vec::new(); workers as usize],
            complete_through: None,
            judge: None,
        }
    }

    /// These histories, keeping `predictor`'s judgement of every step as it
    /// joins if it judges itself by its past (`auto`'s scores, see
    /// [`Scoreboard`]; the LSTM's gain, see [`Calibration`]); the steps
    /// already here are judged now. Without, the predictor replays itself
    /// over the window at every prediction: the same answer, at many times
    /// the cost.
    pub fn judged_for(mut self, predictor: &OnlinePredictor) -> Self {
        let mut judge = match predictor {
            OnlinePredictor::Auto(auto) => Judge::Auto(Scoreboard::new(auto.clone(), self.workers)),
            OnlinePredictor::Lstm(lstm) => {
                Judge::Lstm(Calibration::new(Arc::clone(lstm.model()), self.workers))
            }
            _ => return self,
        };
        for (w, steps) in self.series.iter().enumerate() {
            for t in steps.len().saturating_sub(JUDGED_STEPS).max(1)..steps.len() {
                judge.observe(w, kept(&steps[..t]), &steps[t]);
            }
        }
        self.judge = Some(judge);
        self
    }

    /// Records `worker`'s timing of `iteration` (the first report counts;
    /// repeats are ignored). Iterations join the histories in order.
    pub fn record(&mut self, iteration: u64, worker: u32, timing: Timing) {
        self.record_completing(iteration, worker, timing);
    }

    /// [`record`](Self::record), returning every iteration this timing
    /// completed (with all workers' timings, by worker), in order.
    pub fn record_completing(
        &mut self,
        iteration: u64,
        worker: u32,
        timing: Timing,
    ) -> Vec<(u64, Vec<Timing>)> {
        let mut completed = Vec::new();
        if self.complete_through.is_some_and(|c| iteration <= c) {
            return completed;
        }
        let (filled, slots) = self
            .pending
            .entry(iteration)
            .or_insert_with(|| (0, vec![None; self.workers]));
        if let Some(slot @ None) = slots.get_mut(worker as usize) {
            *slot = Some(timing);
            *filled += 1;
        }
        while let Some(entry) = self.pending.first_entry() {
            let next = self.complete_through.map_or(0, |c| c + 1);
            if *entry.key() != next || entry.get().0 < self.workers {
                break;
            }
            let timings: Vec<Timing> = entry.remove().1.into_iter().flatten().collect();
            self.append(next, &timings);
            self.complete_through = Some(next);
            completed.push((next, timings));
        }
        completed
    }

    /// Records every worker's timing of the next iteration at once (`timings`
    /// by worker), as a replay has them: the iteration joins the histories
    /// as the one after the last complete, whatever number the trace gave
    /// it (a trace may start late or skip some).
    pub fn record_next(&mut self, timings: &[Timing]) {
        let next = self.complete_through.map_or(0, |c| c + 1);
        self.append(next, timings);
        self.complete_through = Some(next);
    }

    /// The complete part of the histories as numbers, for a checkpoint: the
    /// iterations complete (`complete_through + 1`), then per worker its step
    /// count and each step's fields. Timings of incomplete iterations are not
    /// kept (a resumed run measures them anew).
    pub fn to_floats(&self) -> Vec<f64> {
        let mut out = vec![self.complete_through.map_or(0.0, |c| (c + 1) as f64)];
        for steps in self.series.iter().map(|s| kept(s)) {
            out.push(steps.len() as f64);
            for s in steps {
                out.extend([
                    s.iteration as f64,
                    s.unit_us,
                    s.ratio,
                    s.wait_ratio,
                    s.share,
                    s.median_us,
                    s.spread,
                    f64::from(s.workers),
                ]);
            }
        }
        out
    }

    /// Histories of `workers` workers from [`OnlineHistory::to_floats`]; `None`
    /// if the numbers are not such histories.
    pub fn from_floats(workers: u32, floats: &[f64]) -> Option<Self> {
        let mut it = floats.iter().copied();
        let complete = it.next()?;
        let mut series = Vec::with_capacity(workers as usize);
        for _ in 0..workers {
            let n = it.next()?;
            let mut steps = Vec::new();
            for _ in 0..n as usize {
                let f: Vec<f64> = it.by_ref().take(8).collect();
                if f.len() < 8 {
                    return None;
                }
                steps.push(Step {
                    iteration: f[0] as u64,
                    unit_us: f[1],
                    ratio: f[2],
                    wait_ratio: f[3],
                    share: f[4],
                    median_us: f[5],
                    spread: f[6],
                    workers: f[7] as u32,
                });
            }
            series.push(steps);
        }
        if it.next().is_some() {
            return None;
        }
        Some(Self {
            workers: workers as usize,
            pending: BTreeMap::new(),
            series,
            complete_through: (complete >= 1.0).then(|| complete as u64 - 1),
            judge: None,
        })
    }

    /// The histories as they stood when `iteration` was complete: each
    /// worker's steps up to it. A policy that may run ahead (SSP) plans an
    /// iteration from these, which every worker has by then, whatever else
    /// has arrived since, so that every worker computes the same plan.
    pub fn through(&self, iteration: u64) -> Self {
        Self {
            workers: self.workers,
            pending: BTreeMap::new(),
            series: self
                .series
                .iter()
                .map(|steps| {
                    let end = steps.partition_point(|s| s.iteration <= iteration);
                    steps[..end].to_vec()
                })
                .collect(),
            complete_through: self.complete_through.map(|c| c.min(iteration)),
            judge: self.judge.as_ref().map(|j| j.through(iteration)),
        }
    }

    /// Whether every worker's timing of `iteration` is in.
    pub fn complete(&self, iteration: u64) -> bool {
        self.complete_through.is_some_and(|c| c >= iteration)
    }

    fn append(&mut self, iteration: u64, timings: &[Timing]) {
        let rows: Vec<(usize, f64, f64, u32)> = timings
            .iter()
            .enumerate()
            .filter(|(_, t)| t.units > 0)
            .map(|(w, t)| {
                (
                    w,
                    t.busy_us as f64 / f64::from(t.units),
                    t.busy_us as f64,
                    t.units,
                )
            })
            .collect();
        let longest = rows.iter().map(|r| r.2).fold(0.0, f64::max);
        let steps = super::history::iteration_steps(
            iteration,
            rows.iter()
                .map(|&(w, unit_us, busy, units)| (w as u32, unit_us, longest - busy, units)),
        );
        for (worker, step) in steps {
            let s = &mut self.series[worker as usize];
            if let Some(judge) = self.judge.as_mut() {
                judge.observe(worker as usize, kept(s), &step);
            }
            s.push(step);
            // Trimmed in batches (each step moves once), read through `kept`.
            if s.len() >= 2 * KEPT_STEPS {
                s.drain(..s.len() - KEPT_STEPS);
            }
        }
    }

    /// What a plan acts on: `predicted` (by worker, from
    /// [`predict`](Self::predict)) where it calls a worker a straggler (over
    /// `threshold` × the median time per unit) whose slowdowns last (see
    /// `lasts`); elsewhere the median time per unit, so that no units move
    /// on its account. A move made for a slowdown that has ended costs the
    /// worker its units while it is fast again: under a memoryless or
    /// short-lived slowdown (one iteration's, a time window's) the plan then
    /// does more harm than good, and the peers mend the straggler within the
    /// iteration anyway. Differences under the threshold are left to the
    /// peers too: in the what-if replay of `policies-bound`'s `bsp` traces
    /// (18 disrupted-machine and 18 persistent runs), a plan that also
    /// balanced them was the slower in both.
    pub fn lasting(&self, predicted: &[Option<f64>], threshold: f64) -> Vec<Option<f64>> {
        predicted
            .iter()
            .zip(&self.series)
            .map(|(&p, steps)| {
                let steps = kept(steps);
                let median = steps.last()?.median_us;
                let p = p?;
                if p > threshold * median && lasts(steps.iter().map(|s| s.ratio), threshold) {
                    Some(p)
                } else {
                    Some(median)
                }
            })
            .collect()
    }

    /// Each worker's predicted time per unit for the next iteration, µs (None:
    /// no history yet, or a prediction that is not a finite positive time).
    pub fn predict(&self, predictor: &OnlinePredictor) -> Vec<Option<f64>> {
        let histories: Vec<&[Step]> = self.series.iter().map(|s| kept(s)).collect();
        let ratios = match (predictor, &self.judge) {
            (OnlinePredictor::Auto(_), Some(Judge::Auto(board))) => {
                board.predict_next_all(&histories)
            }
            (OnlinePredictor::Lstm(_), Some(Judge::Lstm(calibration))) => {
                calibration.predict_next_all(&histories)
            }
            _ => predictor.as_predictor().predict_next_all(&histories),
        };
        ratios
            .into_iter()
            .zip(&histories)
            .map(|(ratio, steps)| {
                let us = ratio? * steps.last()?.median_us;
                (us.is_finite() && us > 0.0).then_some(us)
            })
            .collect()
    }
}

/// Whether a worker's slowdown, by its `ratios` to the median (oldest
/// first), is one that lasts: slow (above `threshold`) for the last
/// `LASTING_RUN` iterations, and, of the earlier times it had been slow that
/// long, at least `LASTING_SHARE` (of at least `LASTING_SEEN`) were slow the
/// iteration after too.
fn lasts(ratios: impl Iterator<Item = f64>, threshold: f64) -> bool {
    let (mut run, mut seen, mut lasted) = (0usize, 0usize, 0usize);
    for ratio in ratios {
        let slow = ratio > threshold;
        if run >= LASTING_RUN {
            seen += 1;
            lasted += usize::from(slow);
        }
        run = if slow { run + 1 } else { 0 };
    }
    run >= LASTING_RUN && seen >= LASTING_SEEN && lasted as f64 >= LASTING_SHARE * seen as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(units: u32, busy_us: u64) -> Timing {
        Timing { units, busy_us }
    }

    #[test]
    fn a_whole_iteration_recorded_at_once_is_the_next_step() {
        let mut one_by_one = OnlineHistory::new(2);
        let mut at_once = OnlineHistory::new(2);
        for i in 0..3 {
            let timings = [t(4, 100 + i), t(2, 300)];
            one_by_one.record(i, 0, timings[0]);
            one_by_one.record(i, 1, timings[1]);
            at_once.record_next(&timings);
        }
        assert_eq!(at_once.to_floats(), one_by_one.to_floats());
        assert!(at_once.complete(2));
    }

    #[test]
    fn the_histories_through_an_iteration_leave_out_the_later_ones() {
        let mut h = OnlineHistory::new(2);
        for i in 0..4 {
            h.record_next(&[t(4, 100 + 10 * i), t(2, 300)]);
        }
        let through = h.through(1);
        assert!(through.complete(1) && !through.complete(2));
        let mut fresh = OnlineHistory::new(2);
        for i in 0..2 {
            fresh.record_next(&[t(4, 100 + 10 * i), t(2, 300)]);
        }
        assert_eq!(through.to_floats(), fresh.to_floats());
        assert_eq!(
            through.predict(&OnlinePredictor::Last),
            fresh.predict(&OnlinePredictor::Last),
            "what a plan sees"
        );
        // nothing later to leave out
        assert_eq!(h.through(9).to_floats(), h.to_floats());
    }

    #[test]
    fn only_slowdowns_that_have_lasted_before_are_acted_on() {
        let lasts = |r: &[f64]| lasts(r.iter().copied(), 1.5);
        // Slow from the start: acted on once two slow pairs went on.
        assert!(!lasts(&[5.0, 5.0]));
        assert!(!lasts(&[5.0, 5.0, 5.0]));
        assert!(lasts(&[5.0, 5.0, 5.0, 5.0]));
        assert!(lasts(&[1.0, 5.0, 5.0, 5.0, 5.0, 5.0]));
        // Time windows of two to three iterations: a slow pair went on only
        // once in three times.
        let windows = [
            1.0, 5.0, 5.0, 5.0, 1.0, 1.0, 5.0, 5.0, 1.0, 5.0, 5.0, 1.0, 5.0, 5.0,
        ];
        assert!(!lasts(&windows));
        // One-off spikes, and no slowdown now.
        assert!(!lasts(&[5.0, 1.0, 5.0, 1.0, 5.0, 5.0]));
        assert!(!lasts(&[5.0, 5.0, 5.0, 5.0, 1.0]));
    }

    #[test]
    fn a_plan_sees_a_short_lived_slowdown_as_the_median() {
        let mut h = OnlineHistory::new(2);
        // Worker 1 is 5× slow in iterations 1 and 2 only.
        for (i, slow) in [1, 5, 5].into_iter().enumerate() {
            h.record_next(&[t(4, 400), t(4, 400 * slow)]);
            assert!(h.complete(i as u64));
        }
        let predicted = h.predict(&OnlinePredictor::Last);
        assert!(predicted[1].expect("predicted") > 1.5 * predicted[0].expect("predicted"));
        let acted = h.lasting(&predicted, 1.5);
        assert_eq!(acted[0], acted[1], "both at the median: {acted:?}");
        assert!(acted[1] < predicted[1], "{acted:?}");
        // Slow for good: from its fourth slow iteration on, acted on.
        h.record_next(&[t(4, 400), t(4, 2000)]);
        h.record_next(&[t(4, 400), t(4, 2000)]);
        let predicted = h.predict(&OnlinePredictor::Last);
        let acted = h.lasting(&predicted, 1.5);
        assert_eq!(acted[1], predicted[1]);
        assert!(acted[0] < acted[1], "{acted:?}");
    }

    #[test]
    fn a_plan_leaves_a_mild_slowdown_to_the_peers() {
        let mut h = OnlineHistory::new(3);
        // Worker 2 is 1.3× slow for good: under the threshold.
        for i in 0..6 {
            h.record_next(&[t(4, 400), t(4, 400), t(4, 520)]);
            assert!(h.complete(i));
        }
        let predicted = h.predict(&OnlinePredictor::Last);
        assert!(predicted[2] > predicted[0], "{predicted:?}");
        let acted = h.lasting(&predicted, 1.5);
        assert!(acted.iter().all(|&a| a == acted[0]), "{acted:?}");
    }

    #[test]
    fn histories_survive_a_checkpoint() {
        let mut h = OnlineHistory::new(2);
        for i in 0..3 {
            h.record(i, 0, t(4, 100 + i));
            h.record(i, 1, t(4, 300));
        }
        h.record(3, 0, t(4, 50)); // incomplete: not kept
        let back = OnlineHistory::from_floats(2, &h.to_floats()).expect("decodes");
        assert!(back.complete(2) && !back.complete(3));
        assert_eq!(back.series, h.series);
        assert!(OnlineHistory::from_floats(3, &h.to_floats()).is_none());
        assert!(OnlineHistory::from_floats(2, &h.to_floats()[..5]).is_none());
    }

    #[test]
    fn iterations_join_in_order_once_complete() {
        let mut h = OnlineHistory::new(3);
        h.record(1, 0, t(10, 1000));
        assert!(!h.complete(0));
        h.record(0, 0, t(10, 1000));
        h.record(0, 1, t(10, 1000));
        assert!(!h.complete(0));
        assert_eq!(h.predict(&OnlinePredictor::Last), vec![None, None, None]);
        h.record(0, 2, t(10, 3000));
        assert!(h.complete(0) && !h.complete(1));
        // unit times 100, 100, 300 µs: median 100
        assert_eq!(
            h.predict(&OnlinePredictor::Last),
            vec![Some(100.0), Some(100.0), Some(300.0)]
        );
        // a repeat report is ignored; late reports of a complete iteration too
        h.record(1, 0, t(10, 9999));
        h.record(0, 2, t(10, 9999));
        h.record(1, 1, t(10, 2000));
        h.record(1, 2, t(10, 1000));
        assert!(h.complete(1));
        // iteration 1: 100, 200, 100 → median 100
        assert_eq!(
            h.predict(&OnlinePredictor::Last),
            vec![Some(100.0), Some(200.0), Some(100.0)]
        );
        let w2 = &h.series[2];
        assert_eq!(w2[0].wait_ratio, 0.0);
        assert_eq!(w2[1].wait_ratio, 10.0); // 1000 µs less busy than the slowest, / 100
    }

    #[test]
    fn a_worker_with_no_units_has_no_step_and_history_is_bounded() {
        let mut h = OnlineHistory::new(2);
        for i in 0..(KEPT_STEPS as u64 + 10) {
            h.record(i, 0, t(4, 400));
            h.record(i, 1, t(0, 0));
        }
        assert_eq!(kept(&h.series[0]).len(), KEPT_STEPS);
        assert!(h.series[0].len() < 2 * KEPT_STEPS);
        assert!(h.series[1].is_empty());
        assert_eq!(h.predict(&OnlinePredictor::Last), vec![Some(100.0), None]);
    }

    /// Runs `iterations` iterations of `timings(i)` into a history judged
    /// for `predictor` and one replaying it, asserting after each that both
    /// predict the same, also through an earlier iteration (planning under
    /// slack); returns the judged one.
    fn judged_as_replayed(
        predictor: &OnlinePredictor,
        iterations: u64,
        timings: impl Fn(u64) -> [Timing; 3],
    ) -> OnlineHistory {
        let mut judged = OnlineHistory::new(3).judged_for(predictor);
        let mut replayed = OnlineHistory::new(3);
        assert!(judged.judge.is_some() && replayed.judge.is_none());
        for i in 0..iterations {
            let timings = timings(i);
            judged.record_next(&timings);
            replayed.record_next(&timings);
            assert_eq!(
                judged.predict(predictor),
                replayed.predict(predictor),
                "iteration {i}"
            );
            assert_eq!(
                judged.through(i / 2).predict(predictor),
                replayed.through(i / 2).predict(predictor),
                "planned under slack at {i}"
            );
        }
        judged
    }

    #[test]
    fn auto_judged_as_steps_join_predicts_as_its_replay() {
        let auto = OnlinePredictor::Auto(crate::predict::Auto::default());
        // Worker 2 dips every third iteration, then all slow down for good.
        let judged = judged_as_replayed(&auto, 40, |i| {
            let dip = if i % 3 == 2 { 200 } else { 400 };
            let slow = if i >= 25 { 4 } else { 1 };
            [t(4, 400 * slow), t(4, 400 * slow), t(4, dip * slow)]
        });
        // A resumed run scores the steps it comes back with.
        let back = OnlineHistory::from_floats(3, &judged.to_floats())
            .expect("decodes")
            .judged_for(&auto);
        assert_eq!(back.predict(&auto), judged.predict(&auto));
        // Other predictors keep no scores.
        assert!(OnlineHistory::new(3)
            .judged_for(&OnlinePredictor::Last)
            .judge
            .is_none());
    }

    #[test]
    fn lstm_judged_as_steps_join_predicts_as_its_replay() {
        let model = crate::predict::lstm::tests::fit(
            &crate::predict::lstm::tests::cyclic(3, 40),
            &crate::predict::lstm::tests::quick(),
        );
        let lstm = OnlinePredictor::Lstm(CalibratedLstm::new(Arc::new(model)));
        let judged = judged_as_replayed(&lstm, KEPT_STEPS as u64 + 20, |i| {
            let slow = |w: u64| if (i + w).is_multiple_of(3) { 2 } else { 1 };
            [
                t(4, 400 * slow(0)),
                t(4, 400 * slow(1)),
                t(4, 400 * slow(2)),
            ]
        });
        assert!(matches!(judged.judge, Some(Judge::Lstm(_))));
    }
}
