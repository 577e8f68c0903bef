//! Where a pipeline's stages run and what each holds: worker `w` of
//! `W = S × R` is stage `w mod S` of replica `w div S`; stage `s` holds the
//! layers `bounds[s]..bounds[s + 1]`; and the parameter shards are cut at
//! the stages' boundaries, each stage's coordinates into `R` even shards,
//! shard `r · S + s` (owned by worker `r · S + s`, a worker of stage `s`)
//! being part `r` of stage `s`'s. So every shard's part of a unit's
//! gradient comes from one stage worker, and the shard owners reduce it as
//! in data-parallel training.

use std::ops::Range;

use serde::Serialize;

use super::schedule::Schedule;
use crate::data::partition::even_range;

/// A job's pipeline (`[parallel]`), validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StageLayout {
    /// Stages S.
    pub stages: u32,
    /// Replicas R (the job's workers are S × R).
    pub replicas: u32,
    /// S + 1 layer indices: stage `s` holds `bounds[s]..bounds[s + 1]`,
    /// from 0 to the net's layer count.
    pub bounds: Vec<usize>,
    /// The order each stage runs its passes in.
    pub schedule: Schedule,
}

impl StageLayout {
    /// The replica and stage of `worker`.
    pub fn place(&self, worker: u32) -> (u32, u32) {
        (worker / self.stages, worker % self.stages)
    }

    /// The worker of `stage` in `replica`.
    pub fn worker(&self, replica: u32, stage: u32) -> u32 {
        replica * self.stages + stage
    }

    /// The layers stage `stage` holds.
    pub fn layers(&self, stage: u32) -> Range<usize> {
        self.bounds[stage as usize]..self.bounds[stage as usize + 1]
    }

    /// Whether `stage` is the last (its forward ends in the loss).
    pub fn is_last(&self, stage: u32) -> bool {
        stage + 1 == self.stages
    }

    /// The parameter shards, shard `r · S + s` being part `r` of stage
    /// `s`'s coordinates (`stage_params(s)`, which must be contiguous and
    /// cover the parameters in stage order).
    pub fn shards(&self, stage_params: impl Fn(Range<usize>) -> Range<usize>) -> Vec<Range<usize>> {
        let (s_count, r_count) = (self.stages as usize, self.replicas as usize);
        let mut shards = vec![0..0; s_count * r_count];
        for s in 0..self.stages {
            let coords = stage_params(self.layers(s));
            for r in 0..r_count {
                let part = even_range(coords.len(), r_count, r);
                shards[r * s_count + s as usize] =
                    coords.start + part.start..coords.start + part.end;
            }
        }
        shards
    }

    /// Whether `worker` needs shard `shard`'s versions: its stage's shards,
    /// and worker 0 every shard (it hands each whole version to the sink).
    pub fn reads_shard(&self, worker: u32, shard: u32) -> bool {
        worker == 0 || shard % self.stages == worker % self.stages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(stages: u32, replicas: u32, bounds: &[usize]) -> StageLayout {
        StageLayout {
            stages,
            replicas,
            bounds: bounds.to_vec(),
            schedule: Schedule::OneFOneB,
        }
    }

    #[test]
    fn workers_are_stages_within_replicas() {
        let l = layout(2, 3, &[0, 2, 5]);
        let placed: Vec<(u32, u32)> = (0..6).map(|w| l.place(w)).collect();
        assert_eq!(placed, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
        for w in 0..6 {
            let (r, s) = l.place(w);
            assert_eq!(l.worker(r, s), w);
        }
        assert_eq!(l.layers(0), 0..2);
        assert_eq!(l.layers(1), 2..5);
        assert!(l.is_last(1) && !l.is_last(0));
    }

    #[test]
    fn shards_are_cut_at_stage_boundaries_and_owned_by_their_stage() {
        // layers of 10, 20, 30 coordinates: stage 0 = 0..30, stage 1 = 30..60
        let starts = [0, 10, 30, 60];
        let params = |layers: Range<usize>| starts[layers.start]..starts[layers.end];
        let l = layout(2, 2, &[0, 2, 3]);
        let shards = l.shards(params);
        assert_eq!(shards, [0..15, 30..45, 15..30, 45..60]);
        for (k, shard) in shards.iter().enumerate() {
            let stage = k as u32 % l.stages;
            let coords = params(l.layers(stage));
            assert!(coords.start <= shard.start && shard.end <= coords.end);
        }
        assert!(l.reads_shard(3, 1) && !l.reads_shard(3, 0) && l.reads_shard(0, 3));
    }
}
