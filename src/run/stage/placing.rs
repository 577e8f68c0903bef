//! `rebalance-stages` on one stage worker: the placement of the next
//! iteration, decided from every stage worker's measurements
//! ([`crate::pipeline::rebalance`]), the same on every worker.

use std::sync::mpsc::Sender;

use super::epoch::micro_batches;
use super::{staged, StageWorker};
use crate::pipeline::{lasting, rebalance, slowdowns, Measured, Placement};
use crate::run::context::JobContext;
use crate::run::sink::SinkEvent;

/// The placement a run begins with: a resumed run's checkpoint's, where
/// `rebalance-stages` had moved the work (worker 0 tells the sink, which
/// lists it from the run's first iteration), else `even`, the job's own.
pub(super) fn resumed(
    cx: &JobContext,
    worker: u32,
    sink: &Sender<SinkEvent>,
    even: Placement,
) -> Placement {
    match (cx.resume.as_ref()).and_then(|c| c.stages.clone()) {
        Some(p) if fits(&p, &even) => {
            if worker == 0 {
                let _ = sink.send(SinkEvent::Recut {
                    iteration: cx.first_iteration(),
                    placement: p.clone(),
                });
            }
            p
        }
        Some(_) => {
            if worker == 0 {
                tracing::warn!(
                    "the checkpoint's stage placement does not fit this job; starting from the job's own"
                );
            }
            even
        }
        None => even,
    }
}

impl StageWorker {
    /// `rebalance-stages`: the placement of iteration `t`, from every stage
    /// worker's measurements of `t − 1` and `t − 2` (the slowdowns that
    /// lasted through both); false while some are missing.
    pub(super) fn place(&mut self, t: u64) -> bool {
        if !self.rebalance || t <= self.cx.first_iteration() {
            return true;
        }
        let workers = self.cx.plan.workers as usize;
        if self.timings.get(&(t - 1)).is_none_or(|m| m.len() < workers) {
            return false;
        }
        let of = self.timings.remove(&(t - 1)).expect("checked above");
        self.timings.retain(|&i, _| i >= t);
        let l = &self.layout;
        let measured: Vec<Vec<Measured>> = (0..l.replicas)
            .map(|r| (0..l.stages).map(|s| of[&l.worker(r, s)]).collect())
            .collect();
        let micro = self.micro_per_unit(t);
        let costs = staged(&self.cx).layer_costs();
        let Some((now, _)) = slowdowns(&self.placement, &measured, costs) else {
            return true;
        };
        let acted = lasting(self.seen.as_deref(), &now);
        self.seen = Some(now);
        let next = acted.and_then(|s| rebalance(&self.placement, &s, costs, l.schedule, micro));
        if let Some(next) = next {
            if self.worker == 0 {
                tracing::info!(iteration = t, cuts = ?next.cuts, units = ?next.units, "stages rebalanced");
                let _ = self.sink.send(SinkEvent::Recut {
                    iteration: t,
                    placement: next.clone(),
                });
            }
            self.placement = next;
        }
        true
    }

    /// The fewest micro-batches a unit has in iteration `t`.
    fn micro_per_unit(&self, t: u64) -> u32 {
        let size = self.cx.plan.micro_batch as usize;
        (0..self.cx.plan.partitions)
            .flat_map(|p| self.cx.partitioning.units(t, p))
            .map(|unit| micro_batches(std::slice::from_ref(&unit), size).len() as u32)
            .min()
            .unwrap_or(1)
    }
}

/// Whether `placement` could be one of the job whose own is `even`: as many
/// replicas and stages, cuts from the first layer to the last, and every
/// unit once.
fn fits(placement: &Placement, even: &Placement) -> bool {
    let shape = |p: &Placement| -> Vec<(usize, usize)> {
        p.cuts
            .iter()
            .map(|c| (c.len(), c.last().copied().unwrap_or(0)))
            .collect()
    };
    let ordered = placement
        .cuts
        .iter()
        .all(|c| c.first() == Some(&0) && c.windows(2).all(|w| w[0] < w[1]));
    let units = |p: &Placement| {
        let mut all = p.units.concat();
        all.sort_unstable();
        all
    };
    ordered
        && shape(placement) == shape(even)
        && placement.units.len() == even.units.len()
        && units(placement) == units(even)
}
