//! A pipeline's test-set evaluations, put together on worker 0's sink from
//! the scores its replicas' last stages send, batch by batch
//! ([`crate::run::stage`] runs the test batches through the stages). A
//! version whose scores did not all arrive by the run's end (a replica
//! stopped early) is evaluated whole from its parameters instead, with a
//! warning, so that no row is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::workload::Evaluation;

/// The evaluations owed and the scores in hand.
pub struct StagedEvaluations {
    /// Test batches a version's evaluation has.
    batches: u32,
    /// Scores so far, by version and batch.
    scores: BTreeMap<u64, BTreeMap<u32, Vec<(f64, bool)>>>,
    /// Versions whose evaluation is owed, with their parameters.
    awaiting: BTreeMap<u64, Arc<Vec<f64>>>,
    /// Versions evaluated.
    done: BTreeSet<u64>,
    /// Versions evaluated through the stages, and whole (scores missing).
    pub counts: (u32, u32),
}

impl StagedEvaluations {
    /// Evaluations of `batches` test batches each.
    pub fn new(batches: u32) -> Self {
        Self {
            batches,
            scores: BTreeMap::new(),
            awaiting: BTreeMap::new(),
            done: BTreeSet::new(),
            counts: (0, 0),
        }
    }

    /// Version `version` is to be evaluated; its parameters are kept until
    /// its scores are all in.
    pub fn expect(&mut self, version: u64, params: Arc<Vec<f64>>) {
        if !self.done.contains(&version) {
            self.awaiting.insert(version, params);
        }
    }

    /// One batch's scores: the version's evaluation (`evaluate` of every
    /// row's scores in batch order) once they are all in.
    pub fn on_scores(
        &mut self,
        version: u64,
        batch: u32,
        scores: Vec<(f64, bool)>,
        evaluate: impl FnOnce(&[(f64, bool)]) -> Option<Evaluation>,
    ) -> Option<Evaluation> {
        if self.done.contains(&version) || batch >= self.batches {
            return None;
        }
        let got = self.scores.entry(version).or_default();
        got.insert(batch, scores);
        if got.len() < self.batches as usize {
            return None;
        }
        let all: Vec<(f64, bool)> = self
            .scores
            .remove(&version)
            .into_iter()
            .flat_map(BTreeMap::into_values)
            .flatten()
            .collect();
        self.awaiting.remove(&version);
        self.done.insert(version);
        self.counts.0 += 1;
        evaluate(&all)
    }

    /// The run is over: every version still owed, evaluated whole from its
    /// parameters by `whole`.
    pub fn owed(&mut self, whole: impl Fn(&[f64]) -> Evaluation) -> Vec<(u64, Evaluation)> {
        std::mem::take(&mut self.awaiting)
            .into_iter()
            .map(|(version, params)| {
                let got = self.scores.get(&version).map_or(0, BTreeMap::len);
                tracing::warn!(
                    version,
                    batches = got,
                    of = self.batches,
                    "the stages' scores did not all arrive: evaluating the version whole"
                );
                self.done.insert(version);
                self.counts.1 += 1;
                (version, whole(&params))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::cnn::classifier::binary_evaluation;

    fn evaluate(scores: &[(f64, bool)]) -> Option<Evaluation> {
        Some(binary_evaluation(scores))
    }

    #[test]
    fn a_version_is_evaluated_once_its_batches_are_all_in_in_batch_order() {
        let mut e = StagedEvaluations::new(2);
        e.expect(3, Arc::new(vec![0.0]));
        let second = vec![(0.9, true), (0.4, true)];
        let first = vec![(0.2, false), (0.7, false)];
        assert_eq!(e.on_scores(3, 1, second.clone(), evaluate), None);
        let got = e
            .on_scores(3, 0, first.clone(), evaluate)
            .expect("complete");
        let all: Vec<_> = first.into_iter().chain(second).collect();
        assert_eq!(got, binary_evaluation(&all));
        assert_eq!(e.counts, (1, 0));
        // late or stray scores change nothing; nothing is owed
        assert_eq!(e.on_scores(3, 0, all.clone(), evaluate), None);
        assert_eq!(e.on_scores(4, 7, all, evaluate), None, "no batch 7");
        e.expect(3, Arc::new(vec![0.0]));
        assert!(e.owed(|_| unreachable!("nothing owed")).is_empty());
    }

    #[test]
    fn a_version_whose_scores_did_not_all_arrive_is_evaluated_whole() {
        let mut e = StagedEvaluations::new(2);
        e.expect(0, Arc::new(vec![1.0]));
        e.expect(5, Arc::new(vec![2.0]));
        assert_eq!(e.on_scores(5, 0, vec![(0.5, true)], evaluate), None);
        let owed = e.owed(|p| Evaluation::new(p[0], 0.0));
        let versions: Vec<(u64, f64)> = owed.iter().map(|(v, e)| (*v, e.log_loss)).collect();
        assert_eq!(versions, [(0, 1.0), (5, 2.0)]);
        assert_eq!(e.counts, (0, 2));
    }
}
