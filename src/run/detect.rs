//! Who holds an iteration up: progress tracking at worker 0 (the laggard
//! rule itself is [`crate::detect`]).
//!
//! Timely's probe frontier is global: it passes iteration `t` only when the
//! slowest worker is done, so it cannot say *who* was slow. Each worker therefore
//! tells worker 0 when it finishes its units of `t` and when it holds the next
//! version. While `t` is open, [`ProgressTracker::holders`] says which workers
//! still hold it; when the last one finishes, [`detect_laggard`] names it.

use std::collections::BTreeMap;

use crate::detect::{detect_laggard, LaggardReport};
use crate::trace::WorkerRecord;

#[derive(Debug)]
struct OpenIteration {
    records: Vec<Option<WorkerRecord>>,
    finished: usize,
    waited: Vec<bool>,
    report: Option<LaggardReport>,
}

/// Worker 0's view of every open iteration, fed by the workers' progress.
#[derive(Debug)]
pub struct ProgressTracker {
    workers: u32,
    threshold: f64,
    open: BTreeMap<u64, OpenIteration>,
    /// Iterations already reported; a late `Finished` for one (under SSP a
    /// worker may compute a peer's units of an earlier iteration) is ignored.
    closed: std::collections::BTreeSet<u64>,
}

impl ProgressTracker {
    /// A tracker for `workers` workers and the laggard `threshold`.
    pub fn new(workers: u32, threshold: f64) -> Self {
        Self {
            workers,
            threshold,
            open: BTreeMap::new(),
            closed: std::collections::BTreeSet::new(),
        }
    }

    fn entry(&mut self, iteration: u64) -> &mut OpenIteration {
        let workers = self.workers as usize;
        self.open.entry(iteration).or_insert_with(|| OpenIteration {
            records: vec![None; workers],
            finished: 0,
            waited: vec![false; workers],
            report: None,
        })
    }

    /// A worker finished its units. When it was the last one, the iteration's
    /// laggard report is returned (the barrier is about to release). A
    /// worker that is handed units after it first ran out reports again when
    /// it runs out again: its record is replaced and the report redone, so
    /// the iteration ends with the last unit, not with the last worker to
    /// first run out.
    pub fn on_finished(&mut self, record: WorkerRecord) -> Option<LaggardReport> {
        if self.closed.contains(&record.iteration) {
            return None;
        }
        let threshold = self.threshold;
        let workers = self.workers as usize;
        let open = self.entry(record.iteration);
        let slot = &mut open.records[record.worker as usize];
        if slot.is_none() {
            open.finished += 1;
        }
        *slot = Some(record);
        if open.finished < workers {
            return None;
        }
        let all: Vec<WorkerRecord> = open.records.iter().flatten().cloned().collect();
        let report = detect_laggard(&all, threshold);
        let first = open.report.is_none();
        open.report = Some(report.clone());
        first.then_some(report)
    }

    /// A worker holds version `iteration`: its barrier wait for `iteration - 1`
    /// is known. When every worker's is, the finished iteration's records (in
    /// worker order) and report are returned, and the iteration is forgotten.
    pub fn on_ready(
        &mut self,
        worker: u32,
        iteration: u64,
        ready_us: u64,
    ) -> Option<(Vec<WorkerRecord>, LaggardReport)> {
        let previous = iteration.checked_sub(1)?;
        let workers = self.workers as usize;
        let open = self.open.get_mut(&previous)?;
        let record = open.records[worker as usize].as_mut()?;
        record.barrier_wait_us = ready_us.saturating_sub(record.finish_us);
        open.waited[worker as usize] = true;
        if open.waited.iter().filter(|&&w| w).count() < workers || open.report.is_none() {
            return None;
        }
        let done = self.open.remove(&previous)?;
        self.closed.insert(previous);
        let report = done.report?;
        Some((done.records.into_iter().flatten().collect(), report))
    }

    /// Workers that have not finished `iteration` yet (all of them if nobody has
    /// reported; none once it is complete or forgotten).
    pub fn holders(&self, iteration: u64) -> Vec<u32> {
        match self.open.get(&iteration) {
            None => Vec::new(),
            Some(open) => (0..self.workers)
                .filter(|&w| open.records[w as usize].is_none())
                .collect(),
        }
    }

    /// When `iteration` opened, as far as worker 0 knows: the earliest ready time
    /// among the workers that have finished it.
    pub fn open_since_us(&self, iteration: u64) -> Option<u64> {
        self.open
            .get(&iteration)?
            .records
            .iter()
            .flatten()
            .map(|r| r.ready_us)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(worker: u32, ready_us: u64, finish_us: u64) -> WorkerRecord {
        WorkerRecord::single_unit(0, worker, ready_us, finish_us)
    }

    /// Worker 1 first ran out at 110 µs, was handed units and ran out
    /// again at 180: the iteration ends at 180, and its barrier wait runs
    /// from there.
    #[test]
    fn a_worker_handed_units_after_it_ran_out_moves_the_iteration_s_end() {
        let mut t = ProgressTracker::new(2, 0.25);
        assert_eq!(t.on_finished(record(1, 0, 110)), None);
        let first = t.on_finished(record(0, 0, 100)).expect("all finished");
        assert_eq!((first.end_us, first.laggard), (110, None));
        assert_eq!(t.on_finished(record(1, 0, 180)), None);
        assert!(t.on_ready(0, 1, 200).is_none());
        let (records, report) = t.on_ready(1, 1, 200).expect("closed");
        assert_eq!(report.end_us, 180);
        assert_eq!(report.laggard, Some(1));
        assert_eq!(records[1].finish_us, 180);
        assert_eq!(records[1].barrier_wait_us, 20);
    }

    #[test]
    fn tracker_knows_who_still_holds_an_open_iteration() {
        let mut t = ProgressTracker::new(3, 0.25);
        assert_eq!(t.holders(0), Vec::<u32>::new());
        assert_eq!(t.on_finished(record(0, 0, 100)), None);
        assert_eq!(t.on_finished(record(2, 5, 110)), None);
        assert_eq!(t.holders(0), vec![1]);
        assert_eq!(t.open_since_us(0), Some(0));
        // the barrier cannot release before worker 1 is done
        assert_eq!(t.on_ready(0, 1, 900), None);
        let report = t.on_finished(record(1, 2, 800)).expect("last one in");
        assert_eq!(report.laggard, Some(1));
        assert_eq!(t.holders(0), Vec::<u32>::new());
        assert_eq!(t.on_ready(2, 1, 905), None);
        let (records, _) = t.on_ready(1, 1, 901).expect("all waits known");
        let waits: Vec<u64> = records.iter().map(|r| r.barrier_wait_us).collect();
        assert_eq!(waits, vec![800, 101, 795]);
        assert!(t.open.is_empty());
    }
}
