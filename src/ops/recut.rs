//! What a pipeline run would have taken with its layers cut elsewhere: the
//! question the ops replay answers for our own schedules. Each iteration's
//! operations give every stage worker's slowdown against the work its
//! layers held ([`slowdowns`]); the schedule's timeline of the run's cut
//! and of the other cut at those speeds give the ratio by which the
//! recorded step time is scaled. A run whose placement changed
//! (`rebalance-stages`) is measured, iteration by iteration, against the
//! cuts that iteration ran ([`super::placements`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::placements::{cuts_at, PlacementEntry};
use super::{OpKind, OpRecord};
use crate::pipeline::rebalance::{makespan, slowdowns, stage_costs, Measured, Placement};
use crate::pipeline::{best_split, StageLayout};

/// The cut a what-if asks about.
#[derive(Debug, Clone, PartialEq)]
pub enum NewCut {
    /// These layer bounds (S + 1, from 0 to the layer count) in every
    /// replica.
    At(Vec<usize>),
    /// Each iteration's best cuts and data shares for its speeds.
    Best,
}

/// One iteration of a pipeline run, as run and recut.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecutStep {
    /// The iteration.
    pub step: i64,
    /// Its recorded time, first operation to last, µs.
    pub recorded_us: f64,
    /// The schedule's timeline of the run's cut at the measured speeds
    /// (passes only), µs.
    pub modelled_us: f64,
    /// The same with the other cut, µs.
    pub recut_us: f64,
    /// The recorded time scaled by `recut_us / modelled_us`, µs.
    pub predicted_us: f64,
}

/// Every iteration of `ops` (a pipeline run of `layout`, its layers costing
/// `layer_costs` per image, its placements `moves`) replayed with `cut`.
/// An iteration missing a stage worker's passes, or whose placement does
/// not fit the layout, is left out.
pub fn recut_steps(
    ops: &[OpRecord],
    layout: &StageLayout,
    (layer_costs, moves): (&[(f64, f64)], &[PlacementEntry]),
    cut: &NewCut,
) -> Vec<RecutStep> {
    let mut steps: BTreeMap<i64, Vec<&OpRecord>> = BTreeMap::new();
    for o in ops {
        steps.entry(o.step).or_default().push(o);
    }
    let costs = stage_costs(layer_costs);
    let job_cut = vec![layout.bounds.clone(); layout.replicas as usize];
    steps
        .into_iter()
        .filter_map(|(step, ops)| {
            let (r_count, s_count) = (layout.replicas as usize, layout.stages as usize);
            let cuts = cuts_at(moves, u64::try_from(step).ok()?, &job_cut).to_vec();
            let fits = |b: &Vec<usize>| {
                b.len() == s_count + 1
                    && b.first() == Some(&0)
                    && b.last() == Some(&layer_costs.len())
                    && b.windows(2).all(|w| w[0] < w[1])
            };
            if cuts.len() != r_count || !cuts.iter().all(fits) {
                return None;
            }
            let current = Placement {
                cuts,
                units: vec![Vec::new(); r_count],
            };
            let mut pass_us = vec![vec![0.0; s_count]; r_count];
            let mut micro = vec![0u32; r_count];
            for o in &ops {
                let (r, s) = (o.dp_rank as usize, o.stage as usize);
                if r >= r_count || s >= s_count || !o.kind.is_compute() {
                    continue;
                }
                pass_us[r][s] += o.duration_s * 1e6;
                if s == 0 && o.kind == OpKind::ForwardCompute {
                    micro[r] += 1;
                }
            }
            let measured: Vec<Vec<Measured>> = (0..r_count)
                .map(|r| {
                    (0..s_count)
                        .map(|s| Measured {
                            pass_us: pass_us[r][s],
                            rows: f64::from(micro[r]),
                        })
                        .collect()
                })
                .collect();
            let (speeds, typical) = slowdowns(&current, &measured, layer_costs)?;
            let schedule = layout.schedule;
            let longest = |bounds: &dyn Fn(usize) -> Vec<usize>| {
                (0..r_count)
                    .map(|r| makespan(&costs, &speeds[r], &bounds(r), schedule, micro[r]))
                    .fold(0.0, f64::max)
            };
            let modelled = longest(&|r| current.cuts[r].clone()) * typical;
            let recut = match cut {
                NewCut::At(bounds) => longest(&|_| bounds.clone()) * typical,
                NewCut::Best => {
                    let total = micro.iter().sum();
                    let plans = best_split(&costs, &speeds, schedule, (total, 0.0)).ok()?;
                    plans
                        .iter()
                        .map(|p| p.timeline.makespan)
                        .fold(0.0, f64::max)
                        * typical
                }
            };
            let first = ops.iter().map(|o| o.start_s).fold(f64::MAX, f64::min);
            let last = ops.iter().map(|o| o.end_s()).fold(f64::MIN, f64::max);
            let recorded = (last - first) * 1e6;
            Some(RecutStep {
                step,
                recorded_us: recorded,
                modelled_us: modelled,
                recut_us: recut,
                predicted_us: recorded * recut / modelled.max(f64::MIN_POSITIVE),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Schedule;

    const COSTS: [(f64, f64); 5] = [(1.0, 2.0), (1.0, 2.0), (1.0, 2.0), (1.0, 2.0), (1.0, 2.0)];

    /// A step of 2 stages × 1 replica, 4 micro-batches, the stages holding
    /// `layers` layers each, stage s `slow[s]` times slower (1 ms per
    /// layer's forward at speed 1, 2 ms its backward).
    fn step(layers: [usize; 2], slow: [f64; 2]) -> Vec<OpRecord> {
        let mut ops = Vec::new();
        for s in 0..2u32 {
            for m in 0..4 {
                for (kind, ms) in [
                    (OpKind::ForwardCompute, 1.0),
                    (OpKind::BackwardCompute, 2.0),
                ] {
                    ops.push(OpRecord {
                        step: 0,
                        dp_rank: 0,
                        stage: s,
                        rank: s,
                        kind,
                        seq_id: m,
                        mc: 0,
                        mb_id: m as i32,
                        gmc: s as i32,
                        start_s: f64::from(m) * 0.01,
                        duration_s: ms * 1e-3 * layers[s as usize] as f64 * slow[s as usize],
                    });
                }
            }
        }
        ops
    }

    fn layout(bounds: &[usize]) -> StageLayout {
        StageLayout {
            stages: 2,
            replicas: 1,
            bounds: bounds.to_vec(),
            schedule: Schedule::OneFOneB,
        }
    }

    #[test]
    fn the_runs_own_cut_predicts_the_recorded_time() {
        let ops = step([2, 3], [1.0, 1.0]);
        let out = recut_steps(
            &ops,
            &layout(&[0, 2, 5]),
            (&COSTS, &[]),
            &NewCut::At(vec![0, 2, 5]),
        );
        assert_eq!(out.len(), 1);
        assert!((out[0].predicted_us - out[0].recorded_us).abs() < 1e-6);
    }

    #[test]
    fn moving_layers_off_a_slow_stage_shortens_the_iteration() {
        // stage 1 (3 layers) 2× slow: moving one layer to stage 0 helps
        let ops = step([2, 3], [1.0, 2.0]);
        let l = layout(&[0, 2, 5]);
        let moved = recut_steps(&ops, &l, (&COSTS, &[]), &NewCut::At(vec![0, 3, 5]))[0].clone();
        assert!(moved.recut_us < 0.8 * moved.modelled_us, "{moved:?}");
        let best = recut_steps(&ops, &l, (&COSTS, &[]), &NewCut::Best)[0].clone();
        assert!(best.recut_us <= moved.recut_us + 1e-9, "{best:?}");
        // the slow stage's speed is measured, not assumed: the stage worker
        // at speed 1 with 2 layers is the reference
        let worse = recut_steps(&ops, &l, (&COSTS, &[]), &NewCut::At(vec![0, 1, 5]))[0].clone();
        assert!(worse.recut_us > worse.modelled_us, "{worse:?}");
    }

    #[test]
    fn a_moved_placement_is_measured_against_the_cut_it_ran() {
        // the job cut at [0, 2, 5], the iteration ran at [0, 3, 5]
        let ops = step([3, 2], [1.0, 2.0]);
        let l = layout(&[0, 2, 5]);
        let moves = [PlacementEntry {
            iteration: 0,
            cuts: vec![vec![0, 3, 5]],
        }];
        let own = recut_steps(&ops, &l, (&COSTS, &moves), &NewCut::At(vec![0, 3, 5]));
        assert!(
            (own[0].predicted_us - own[0].recorded_us).abs() < 1e-6,
            "{own:?}"
        );
        // read against the job's cut, the same step mispredicts its own cut
        let blind = recut_steps(&ops, &l, (&COSTS, &[]), &NewCut::At(vec![0, 3, 5]));
        assert!(
            (blind[0].predicted_us - blind[0].recorded_us).abs() > 1e-3 * blind[0].recorded_us,
            "{blind:?}"
        );
        // a placement that does not fit the layout leaves the step out
        let bad = [PlacementEntry {
            iteration: 0,
            cuts: vec![vec![0, 5]],
        }];
        assert!(recut_steps(&ops, &l, (&COSTS, &bad), &NewCut::Best).is_empty());
    }
}
