//! The pipeline's bound: the best cut of the layers into stages for the
//! stage workers' measured speeds, and what the schedule's bubble leaves
//! of it ([`best_cut`]). A cut is a list of contiguous, non-empty layer
//! ranges covering the layers in order, one per stage.

use std::ops::Range;

use super::schedule::{timeline, Schedule, ScheduleError, StageCost, Timeline};

/// The cut of `layers` (each layer's cost per micro-batch at full speed)
/// into `slowdowns.len()` stages, stage s on a worker `slowdowns[s]` times
/// slower, whose iteration of `micro` micro-batches under `schedule` (with
/// `transfer` s per crossing) is shortest, and that iteration. Ties go to
/// the cut whose earlier cuts come first.
pub fn best_cut(
    layers: &[StageCost],
    slowdowns: &[f64],
    schedule: Schedule,
    (micro, transfer): (u32, f64),
) -> Result<(Vec<Range<usize>>, Timeline), ScheduleError> {
    let stages = slowdowns.len();
    if stages == 0 || stages > layers.len() {
        return Err(ScheduleError::Layers {
            stages: u32::try_from(stages).unwrap_or(u32::MAX),
            layers: layers.len(),
        });
    }
    if let Some((stage, &value)) =
        (slowdowns.iter().enumerate()).find(|(_, &f)| !f.is_finite() || f <= 0.0)
    {
        return Err(ScheduleError::Cost { stage, value });
    }
    let mut best: Option<(Vec<Range<usize>>, Timeline)> = None;
    for cut in cuts(layers.len(), stages) {
        let costs = cut_costs(layers, &cut, slowdowns);
        let tl = timeline(schedule, &costs, micro, transfer)?;
        if best.as_ref().is_none_or(|(_, b)| tl.makespan < b.makespan) {
            best = Some((cut, tl));
        }
    }
    Ok(best.expect("at least one cut"))
}

/// The stages' costs of `layers` cut at `cut`, stage s `slowdowns[s]`
/// times slower.
fn cut_costs(layers: &[StageCost], cut: &[Range<usize>], slowdowns: &[f64]) -> Vec<StageCost> {
    cut.iter()
        .zip(slowdowns)
        .map(|(range, &f)| StageCost {
            forward: f * layers[range.clone()].iter().map(|c| c.forward).sum::<f64>(),
            backward: f * layers[range.clone()]
                .iter()
                .map(|c| c.backward)
                .sum::<f64>(),
        })
        .collect()
}

/// One replica's part of the hybrid pipeline's bound.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaPlan {
    /// The micro-batches it computes.
    pub micro: u32,
    /// Its best cut for them.
    pub cut: Vec<Range<usize>>,
    /// Its iteration.
    pub timeline: Timeline,
}

/// The hybrid pipeline's bound: `micro` micro-batches shared among
/// replicas, replica r's stage s on a worker `slowdowns[r][s]` times slower.
/// Each replica takes its best cut ([`best_cut`]) for the micro-batches it
/// gets, and the shares are chosen so that the slowest replica's iteration
/// is shortest (every replica gets at least as many micro-batches as the
/// schedule needs). Returns each replica's share, cut and iteration.
pub fn best_split(
    layers: &[StageCost],
    slowdowns: &[Vec<f64>],
    schedule: Schedule,
    (micro, transfer): (u32, f64),
) -> Result<Vec<ReplicaPlan>, ScheduleError> {
    split(layers, slowdowns, schedule, (micro, transfer), None)
}

/// [`best_split`] with every replica's layers cut at `cut`: only the data
/// moves between the replicas (what the data-parallel policies could do
/// across replicas within an iteration).
pub fn best_shares(
    layers: &[StageCost],
    slowdowns: &[Vec<f64>],
    schedule: Schedule,
    (micro, transfer): (u32, f64),
    cut: &[Range<usize>],
) -> Result<Vec<ReplicaPlan>, ScheduleError> {
    if cut.len() != slowdowns.first().map_or(0, Vec::len)
        || !cuts(layers.len(), cut.len()).iter().any(|c| c == cut)
    {
        return Err(ScheduleError::Layers {
            stages: u32::try_from(cut.len()).unwrap_or(u32::MAX),
            layers: layers.len(),
        });
    }
    split(layers, slowdowns, schedule, (micro, transfer), Some(cut))
}

/// The shares of [`best_split`], each replica at its best cut or at
/// `fixed`.
fn split(
    layers: &[StageCost],
    slowdowns: &[Vec<f64>],
    schedule: Schedule,
    (micro, transfer): (u32, f64),
    fixed: Option<&[Range<usize>]>,
) -> Result<Vec<ReplicaPlan>, ScheduleError> {
    let replicas = u32::try_from(slowdowns.len()).unwrap_or(u32::MAX);
    let stages = slowdowns.first().map_or(0, Vec::len);
    let least = match schedule {
        Schedule::OneFOneB => u32::try_from(stages).unwrap_or(u32::MAX),
        Schedule::GPipe => 1,
    };
    if replicas == 0 || micro < least.saturating_mul(replicas) {
        return Err(ScheduleError::TooFewMicroBatches {
            micro,
            stages: least.saturating_mul(replicas.max(1)),
        });
    }
    // each replica's best iteration for every share it could get
    let most = micro - least * (replicas - 1);
    let mut table: Vec<Vec<(Vec<Range<usize>>, Timeline)>> = Vec::new();
    for speeds in slowdowns {
        if speeds.len() != stages {
            return Err(ScheduleError::Layers {
                stages: u32::try_from(speeds.len()).unwrap_or(u32::MAX),
                layers: layers.len(),
            });
        }
        table.push(
            (least..=most)
                .map(|m| match fixed {
                    None => best_cut(layers, speeds, schedule, (m, transfer)),
                    Some(cut) => {
                        let costs = cut_costs(layers, cut, speeds);
                        let tl = timeline(schedule, &costs, m, transfer)?;
                        Ok((cut.to_vec(), tl))
                    }
                })
                .collect::<Result<_, _>>()?,
        );
    }
    // give each next micro-batch to the replica whose iteration grows least
    let time = |r: usize, m: u32| table[r][(m - least) as usize].1.makespan;
    let mut shares = vec![least; replicas as usize];
    for _ in 0..micro - least * replicas {
        let r = (0..shares.len())
            .min_by(|&a, &b| time(a, shares[a] + 1).total_cmp(&time(b, shares[b] + 1)))
            .expect("at least one replica");
        shares[r] += 1;
    }
    Ok(shares
        .iter()
        .enumerate()
        .map(|(r, &m)| {
            let (cut, timeline) = table[r][(m - least) as usize].clone();
            ReplicaPlan {
                micro: m,
                cut,
                timeline,
            }
        })
        .collect())
}

/// A paced pipeline iteration's bound, µs: `micro` micro-batches of
/// `micro_ns` nominal ns each (the whole net's forward and backward, shared
/// among the layers by `layer_costs`), on stage workers `slowdowns[r][s]`
/// times slower, at the best cuts and data shares ([`best_split`]): the
/// slowest replica's iteration. None when no split fits the schedule.
pub fn paced_bound_us(
    layer_costs: &[(f64, f64)],
    slowdowns: &[Vec<f64>],
    schedule: Schedule,
    (micro, micro_ns): (u32, f64),
) -> Option<f64> {
    paced(layer_costs, slowdowns, schedule, (micro, micro_ns), None)
}

/// [`paced_bound_us`] with every replica's layers cut at `cut`
/// ([`best_shares`]): the bound of moving data alone between replicas.
pub fn paced_shares_bound_us(
    layer_costs: &[(f64, f64)],
    slowdowns: &[Vec<f64>],
    schedule: Schedule,
    (micro, micro_ns): (u32, f64),
    cut: &[Range<usize>],
) -> Option<f64> {
    paced(
        layer_costs,
        slowdowns,
        schedule,
        (micro, micro_ns),
        Some(cut),
    )
}

fn paced(
    layer_costs: &[(f64, f64)],
    slowdowns: &[Vec<f64>],
    schedule: Schedule,
    (micro, micro_ns): (u32, f64),
    cut: Option<&[Range<usize>]>,
) -> Option<f64> {
    let total: f64 = layer_costs.iter().map(|(f, b)| f + b).sum();
    let scale = micro_ns / total.max(f64::MIN_POSITIVE) / 1e3;
    let costs: Vec<StageCost> = layer_costs
        .iter()
        .map(|&(f, b)| StageCost {
            forward: f * scale,
            backward: b * scale,
        })
        .collect();
    let plans = match cut {
        None => best_split(&costs, slowdowns, schedule, (micro, 0.0)),
        Some(cut) => best_shares(&costs, slowdowns, schedule, (micro, 0.0), cut),
    }
    .ok()?;
    Some(
        plans
            .iter()
            .map(|p| p.timeline.makespan)
            .fold(0.0, f64::max),
    )
}

/// Every cut of `layers` layers into `stages` non-empty contiguous ranges,
/// in the order of their cut points.
pub fn cuts(layers: usize, stages: usize) -> Vec<Vec<Range<usize>>> {
    fn go(
        from: usize,
        layers: usize,
        left: usize,
        acc: &mut Vec<Range<usize>>,
        out: &mut Vec<Vec<Range<usize>>>,
    ) {
        if left == 1 {
            acc.push(from..layers);
            out.push(acc.clone());
            acc.pop();
            return;
        }
        for end in from + 1..=layers - (left - 1) {
            acc.push(from..end);
            go(end, layers, left - 1, acc, out);
            acc.pop();
        }
    }
    let mut out = Vec::new();
    if stages >= 1 && stages <= layers {
        go(0, layers, stages, &mut Vec::new(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pneumonia CNN's layers as `benches/cnn_layers.rs` measured them
    /// (ms per image, forward and backward: conv1, conv2, conv3, lstm, head).
    fn measured() -> Vec<StageCost> {
        [
            (0.238, 0.088),
            (0.528, 1.123),
            (0.425, 0.844),
            (0.333, 0.301),
            (0.013, 0.012),
        ]
        .iter()
        .map(|&(forward, backward)| StageCost { forward, backward })
        .collect()
    }

    #[test]
    fn cuts_are_every_composition_in_order() {
        assert_eq!(cuts(3, 2), vec![vec![0..1, 1..3], vec![0..2, 2..3]]);
        assert_eq!(cuts(5, 1), vec![vec![0..5]]);
        assert_eq!(cuts(5, 5).len(), 1);
        // C(4, 1) = 4, C(4, 2) = 6
        assert_eq!(cuts(5, 2).len(), 4);
        assert_eq!(cuts(5, 3).len(), 6);
        assert!(cuts(2, 3).is_empty() && cuts(2, 0).is_empty());
    }

    #[test]
    fn two_even_stages_cut_after_the_second_convolution() {
        let (cut, tl) = best_cut(&measured(), &[1.0, 1.0], Schedule::OneFOneB, (8, 0.0)).unwrap();
        assert_eq!(cut, vec![0..2, 2..5]);
        assert!(tl.bubble.iter().all(|&b| b < 0.25), "{:?}", tl.bubble);
    }

    #[test]
    fn a_slow_stage_worker_gets_fewer_layers() {
        // the first stage's worker 2× slow: the convolutions move off it
        let (even, _) = best_cut(&measured(), &[1.0, 1.0], Schedule::OneFOneB, (8, 0.0)).unwrap();
        let (slow, tl) = best_cut(&measured(), &[2.0, 1.0], Schedule::OneFOneB, (8, 0.0)).unwrap();
        assert!(slow[0].end < even[0].end, "{slow:?}");
        // and no other cut is faster
        for cut in cuts(5, 2) {
            let costs: Vec<StageCost> = cut
                .iter()
                .zip([2.0, 1.0])
                .map(|(r, f)| StageCost {
                    forward: f * measured()[r.clone()].iter().map(|c| c.forward).sum::<f64>(),
                    backward: f * measured()[r.clone()]
                        .iter()
                        .map(|c| c.backward)
                        .sum::<f64>(),
                })
                .collect();
            let other = timeline(Schedule::OneFOneB, &costs, 8, 0.0).unwrap();
            assert!(other.makespan >= tl.makespan - 1e-12, "{cut:?}");
        }
    }

    #[test]
    fn a_slow_replica_gets_fewer_micro_batches_and_the_split_is_best() {
        let layers = measured();
        let even = best_split(
            &layers,
            &vec![vec![1.0, 1.0]; 2],
            Schedule::OneFOneB,
            (16, 0.0),
        )
        .unwrap();
        assert_eq!(even.iter().map(|r| r.micro).collect::<Vec<_>>(), [8, 8]);
        // replica 1's second stage 2× slow: a re-cut moves layers off it, and
        // what a cut cannot even out moves as data share
        let slowed = [vec![1.0, 1.0], vec![1.0, 2.0]];
        let split = best_split(&layers, &slowed, Schedule::OneFOneB, (16, 0.0)).unwrap();
        let shares: Vec<u32> = split.iter().map(|r| r.micro).collect();
        assert_eq!(shares.iter().sum::<u32>(), 16);
        assert!(shares[1] < shares[0], "{shares:?}");
        assert!(
            split[1].cut[1].len() < split[0].cut[1].len(),
            "{:?}",
            split[1].cut
        );
        let worst = split
            .iter()
            .map(|r| r.timeline.makespan)
            .fold(0.0, f64::max);
        // no other split of 16 (each at its best cut) is faster
        for m0 in 2..=14 {
            let a = best_cut(&layers, &slowed[0], Schedule::OneFOneB, (m0, 0.0))
                .unwrap()
                .1;
            let b = best_cut(&layers, &slowed[1], Schedule::OneFOneB, (16 - m0, 0.0))
                .unwrap()
                .1;
            assert!(a.makespan.max(b.makespan) >= worst - 1e-12, "{m0}");
        }
        // 1F1B needs S micro-batches a replica
        assert!(matches!(
            best_split(&layers, &slowed, Schedule::OneFOneB, (3, 0.0)),
            Err(ScheduleError::TooFewMicroBatches {
                micro: 3,
                stages: 4
            })
        ));
    }

    #[test]
    fn data_alone_moves_less_than_a_re_cut_and_more_than_nothing() {
        let layers = measured();
        let cut = vec![0..2, 2..5];
        // replica 1's first stage 5× slow (FlexRR's slow-worker at 400 %)
        let slowed = [vec![1.0, 1.0], vec![5.0, 1.0]];
        let worst = |plans: &[ReplicaPlan]| {
            plans
                .iter()
                .map(|r| r.timeline.makespan)
                .fold(0.0, f64::max)
        };
        let shares = best_shares(&layers, &slowed, Schedule::OneFOneB, (16, 0.0), &cut).unwrap();
        assert!(shares.iter().all(|r| r.cut == cut), "the cut stays");
        assert!(shares[1].micro < shares[0].micro);
        let both = best_split(&layers, &slowed, Schedule::OneFOneB, (16, 0.0)).unwrap();
        let costs = |f: &[f64]| cut_costs(&layers, &cut, f);
        let nothing = timeline(Schedule::OneFOneB, &costs(&slowed[1]), 8, 0.0)
            .unwrap()
            .makespan;
        assert!(worst(&both) <= worst(&shares) + 1e-12);
        assert!(worst(&shares) < nothing);
        // a cut the net does not have is refused
        let one_stage: Vec<Range<usize>> = std::iter::once(0..5).collect();
        for bad in [vec![0..2, 3..5], one_stage, vec![0..2, 2..6]] {
            assert!(best_shares(&layers, &slowed, Schedule::OneFOneB, (16, 0.0), &bad).is_err());
        }
    }

    #[test]
    fn impossible_cuts_are_refused() {
        let err = best_cut(&measured(), &[1.0; 6], Schedule::GPipe, (8, 0.0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "6 stages for a net of 5 layers: a stage holds at least one layer"
        );
        assert!(best_cut(&measured(), &[], Schedule::GPipe, (8, 0.0)).is_err());
        assert!(matches!(
            best_cut(&measured(), &[1.0, 0.0], Schedule::GPipe, (8, 0.0)),
            Err(ScheduleError::Cost { stage: 1, .. })
        ));
        assert!(matches!(
            best_cut(&measured(), &[1.0, 1.0], Schedule::OneFOneB, (1, 0.0)),
            Err(ScheduleError::TooFewMicroBatches { .. })
        ));
    }
}
