//! `rebalance-stages`: between iterations, each replica's layers re-cut
//! between its stage workers and the partitions re-shared between the
//! replicas, in proportion to the speeds measured in the iteration before
//! (Malleus's idea at forestall's granularity: whole layers, whole
//! units). A pure function of what every stage worker measured, so
//! that every worker computes the same placement.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::bound::best_split;
use super::schedule::{timeline, Schedule, StageCost};

/// Where a pipeline's work is in one iteration: each replica's cut and
/// units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Each replica's layer bounds (S + 1 each: stage s holds
    /// `bounds[s]..bounds[s + 1]`).
    pub cuts: Vec<Vec<usize>>,
    /// Each replica's units, as (partition, unit of the partition), in
    /// partition order.
    pub units: Vec<Vec<(u32, u32)>>,
}

impl Placement {
    /// Every replica cut at `bounds`, partition p (its `units_per_partition`
    /// units) on replica p mod R.
    pub fn even(
        bounds: &[usize],
        replicas: u32,
        (partitions, units_per_partition): (u32, u32),
    ) -> Self {
        Self {
            cuts: vec![bounds.to_vec(); replicas as usize],
            units: (0..replicas)
                .map(|r| {
                    (r..partitions)
                        .step_by(replicas as usize)
                        .flat_map(|p| (0..units_per_partition).map(move |u| (p, u)))
                        .collect()
                })
                .collect(),
        }
    }

    /// The layers stage `stage` of replica `replica` holds.
    pub fn layers(&self, replica: u32, stage: u32) -> Range<usize> {
        let b = &self.cuts[replica as usize];
        b[stage as usize]..b[stage as usize + 1]
    }
}

/// What the iteration before showed of one stage worker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Its passes' time (compute and injected delay), µs.
    pub pass_us: f64,
    /// Images its passes covered.
    pub rows: f64,
}

/// How much better a new placement must promise to be than the current
/// one, under the same estimates, before the work moves.
pub const MIN_GAIN: f64 = 0.05;

/// The placement for the next iteration: the replicas' best cuts and
/// shares of the micro-batches ([`best_split`]) for stage workers
/// `slowdowns[r][s]` times slower than the median (see [`slowdowns`] and
/// [`lasting`]), the shares rounded to whole units of `micro_per_unit`
/// micro-batches each. None when the current placement is as good (within
/// [`MIN_GAIN`]).
pub fn rebalance(
    current: &Placement,
    slowdowns: &[Vec<f64>],
    layer_costs: &[(f64, f64)],
    schedule: Schedule,
    micro_per_unit: u32,
) -> Option<Placement> {
    let replicas = current.cuts.len();
    let stages = current.cuts.first()?.len() - 1;
    if slowdowns.len() != replicas || slowdowns.iter().any(|row| row.len() != stages) {
        return None;
    }
    let costs = stage_costs(layer_costs);
    let mut all: Vec<(u32, u32)> = current.units.concat();
    all.sort_unstable();
    let units = all.len() as u32;
    let micro = units * micro_per_unit;
    // the current placement's iteration under these estimates
    let now = (0..replicas)
        .map(|r| {
            let m = current.units[r].len() as u32 * micro_per_unit;
            makespan(&costs, &slowdowns[r], &current.cuts[r], schedule, m)
        })
        .fold(0.0, f64::max);
    let plans = best_split(&costs, slowdowns, schedule, (micro, 0.0)).ok()?;
    let shares = whole_units(
        &plans.iter().map(|p| f64::from(p.micro)).collect::<Vec<_>>(),
        units,
        least_units(schedule, stages as u32, micro_per_unit),
    );
    let cuts: Vec<Vec<usize>> = plans
        .iter()
        .map(|p| {
            let mut b: Vec<usize> = p.cut.iter().map(|r| r.start).collect();
            b.push(layer_costs.len());
            b
        })
        .collect();
    let next = (0..replicas)
        .map(|r| {
            let m = shares[r] * micro_per_unit;
            makespan(&costs, &slowdowns[r], &cuts[r], schedule, m)
        })
        .fold(0.0, f64::max);
    if next >= (1.0 - MIN_GAIN) * now {
        return None;
    }
    Some(Placement {
        units: deal(&shares, &all),
        cuts,
    })
}

/// Each stage worker's slowdown (its time per unit of the layers' modelled
/// cost over the median worker's) and the median's µs per unit of cost,
/// from what each measured under `current`. None when something was not
/// measured.
pub fn slowdowns(
    current: &Placement,
    measured: &[Vec<Measured>],
    layer_costs: &[(f64, f64)],
) -> Option<(Vec<Vec<f64>>, f64)> {
    let replicas = current.cuts.len();
    let stages = current.cuts.first()?.len() - 1;
    let per_image =
        |layers: Range<usize>| -> f64 { layer_costs[layers].iter().map(|(f, b)| f + b).sum() };
    let rate: Vec<Vec<f64>> = (0..replicas)
        .map(|r| {
            (0..stages)
                .map(|s| {
                    let m = measured.get(r)?.get(s)?;
                    let work = m.rows * per_image(current.layers(r as u32, s as u32));
                    (m.pass_us.is_finite() && m.pass_us > 0.0 && work > 0.0)
                        .then(|| m.pass_us / work)
                })
                .collect::<Option<Vec<f64>>>()
        })
        .collect::<Option<_>>()?;
    let mut all: Vec<f64> = rate.iter().flatten().copied().collect();
    all.sort_by(f64::total_cmp);
    let typical = all[all.len() / 2];
    let slowdowns = rate
        .iter()
        .map(|row| row.iter().map(|x| x / typical).collect())
        .collect();
    Some((slowdowns, typical))
}

/// The slowdowns a placement should follow: each stage worker's the lesser
/// of its last two iterations' (`before`, `now`), so that work moves off a
/// worker only once it has been slow twice in a row (a slowdown that
/// changes every iteration, FlexRR's slow-worker, would otherwise draw the
/// work after last iteration's straggler) and back as soon as it is not.
/// None on the first iteration measured.
pub fn lasting(before: Option<&[Vec<f64>]>, now: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let before = before?;
    (before.len() == now.len()).then_some(())?;
    before
        .iter()
        .zip(now)
        .map(|(b, n)| {
            (b.len() == n.len()).then(|| b.iter().zip(n).map(|(x, y)| x.min(*y)).collect())
        })
        .collect()
}

/// The layers' costs as a schedule's stage costs.
pub fn stage_costs(layer_costs: &[(f64, f64)]) -> Vec<StageCost> {
    layer_costs
        .iter()
        .map(|&(forward, backward)| StageCost { forward, backward })
        .collect()
}

/// The iteration of one replica of `micro` micro-batches cut at `bounds`,
/// its stages `slowdowns` times slower.
pub fn makespan(
    costs: &[StageCost],
    slowdowns: &[f64],
    bounds: &[usize],
    schedule: Schedule,
    micro: u32,
) -> f64 {
    let stages: Vec<StageCost> = bounds
        .windows(2)
        .zip(slowdowns)
        .map(|(b, &f)| StageCost {
            forward: f * costs[b[0]..b[1]].iter().map(|c| c.forward).sum::<f64>(),
            backward: f * costs[b[0]..b[1]].iter().map(|c| c.backward).sum::<f64>(),
        })
        .collect();
    timeline(schedule, &stages, micro.max(1), 0.0).map_or(f64::INFINITY, |t| t.makespan)
}

/// The fewest units a replica may hold: enough micro-batches for the
/// schedule, and at least one unit.
fn least_units(schedule: Schedule, stages: u32, micro_per_unit: u32) -> u32 {
    (schedule.least_micro(stages))
        .div_ceil(micro_per_unit.max(1))
        .max(1)
}

/// `partitions` whole units shared in proportion to `wanted` (largest
/// remainders first, ties to the earlier replica), each at least `least`.
fn whole_units(wanted: &[f64], partitions: u32, least: u32) -> Vec<u32> {
    let total: f64 = wanted.iter().sum();
    let exact: Vec<f64> = wanted
        .iter()
        .map(|w| w / total.max(f64::MIN_POSITIVE) * f64::from(partitions))
        .collect();
    let mut shares: Vec<u32> = exact
        .iter()
        .map(|e| (e.floor() as u32).max(least))
        .collect();
    let mut order: Vec<usize> = (0..wanted.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    while shares.iter().sum::<u32>() < partitions {
        for &r in &order {
            if shares.iter().sum::<u32>() < partitions {
                shares[r] += 1;
            }
        }
    }
    while shares.iter().sum::<u32>() > partitions {
        // take from the replica most above its due, never below `least`
        let r = (0..shares.len())
            .filter(|&r| shares[r] > least)
            .max_by(|&a, &b| {
                (f64::from(shares[a]) - exact[a]).total_cmp(&(f64::from(shares[b]) - exact[b]))
            })
            .expect("partitions ≥ least × replicas");
        shares[r] -= 1;
    }
    shares
}

/// `units` (in order) dealt out by `shares` in runs of consecutive units,
/// replica after replica, so that a replica holds whole partitions where
/// the shares allow.
fn deal(shares: &[u32], units: &[(u32, u32)]) -> Vec<Vec<(u32, u32)>> {
    let mut rest = units;
    shares
        .iter()
        .map(|&n| {
            let (mine, after) = rest.split_at((n as usize).min(rest.len()));
            rest = after;
            mine.to_vec()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const COSTS: [(f64, f64); 5] = [
        (0.24, 0.09),
        (0.53, 1.12),
        (0.42, 0.84),
        (0.33, 0.30),
        (0.01, 0.01),
    ];

    /// What a placement's stage workers measure when worker (r, s) is
    /// `slow[r][s]` times slower, per image of its layers' cost.
    fn measure(p: &Placement, slow: &[Vec<f64>]) -> Vec<Vec<Measured>> {
        (0..p.cuts.len())
            .map(|r| {
                let rows = p.units[r].len() as f64 * 16.0;
                (0..p.cuts[r].len() - 1)
                    .map(|s| {
                        let cost: f64 = COSTS[p.layers(r as u32, s as u32)]
                            .iter()
                            .map(|(f, b)| f + b)
                            .sum();
                        Measured {
                            pass_us: 1000.0 * slow[r][s] * rows * cost,
                            rows,
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// The slowdowns `measured` shows under `p`.
    fn seen(p: &Placement, measured: &[Vec<Measured>]) -> Vec<Vec<f64>> {
        slowdowns(p, measured, &COSTS).expect("all measured").0
    }

    /// The placement after `p` when its stage workers are `slow`, with
    /// `micro` micro-batches a unit (it must move).
    fn moved(p: &Placement, slow: &[Vec<f64>], micro: u32) -> Placement {
        let s = seen(p, &measure(p, slow));
        rebalance(p, &s, &COSTS, Schedule::OneFOneB, micro).expect("a better placement")
    }

    #[test]
    fn equal_workers_keep_the_even_placement() {
        let p = Placement::even(&[0, 2, 5], 2, (8, 1));
        assert_eq!(
            p.units,
            [
                vec![(0, 0), (2, 0), (4, 0), (6, 0)],
                vec![(1, 0), (3, 0), (5, 0), (7, 0)]
            ]
        );
        let two = Placement::even(&[0, 2, 5], 2, (3, 2));
        assert_eq!(
            two.units,
            [vec![(0, 0), (0, 1), (2, 0), (2, 1)], vec![(1, 0), (1, 1)]]
        );
        let m = measure(&p, &[vec![1.0, 1.0], vec![1.0, 1.0]]);
        assert_eq!(
            rebalance(&p, &seen(&p, &m), &COSTS, Schedule::OneFOneB, 2),
            None
        );
    }

    #[test]
    fn a_slow_stage_worker_loses_layers_and_its_replica_data() {
        let p = Placement::even(&[0, 2, 5], 2, (8, 1));
        // replica 0's first stage 2× slow
        let slow = [vec![2.0, 1.0], vec![1.0, 1.0]];
        let next = moved(&p, &slow, 2);
        assert!(
            next.cuts[0][1] < 2,
            "layers move off the slow stage: {:?}",
            next.cuts
        );
        assert!(next.units[0].len() < next.units[1].len(), "{next:?}");
        let mut all: Vec<u32> = next.units.concat().iter().map(|&(p, _)| p).collect();
        all.sort_unstable();
        assert_eq!(all, (0..8).collect::<Vec<_>>(), "every unit once");
        // measured again under the new placement, it stays
        let again = measure(&next, &slow);
        assert_eq!(
            rebalance(&next, &seen(&next, &again), &COSTS, Schedule::OneFOneB, 2),
            None
        );
    }

    #[test]
    fn shares_are_whole_units_with_room_for_the_schedule() {
        assert_eq!(whole_units(&[3.0, 1.0], 8, 1), [6, 2]);
        assert_eq!(whole_units(&[100.0, 0.0], 8, 2), [6, 2]);
        assert_eq!(whole_units(&[1.0, 1.0, 1.0], 8, 1), [3, 3, 2]);
        let units = [(0, 0), (0, 1), (1, 0), (1, 1)];
        assert_eq!(
            deal(&[3, 1], &units),
            [vec![(0, 0), (0, 1), (1, 0)], vec![(1, 1)]]
        );
        assert_eq!(least_units(Schedule::OneFOneB, 3, 2), 2);
        assert_eq!(least_units(Schedule::GPipe, 3, 2), 1);
    }

    #[test]
    fn nothing_measured_changes_nothing() {
        let p = Placement::even(&[0, 2, 5], 2, (8, 1));
        let mut m = measure(&p, &[vec![1.0, 1.0], vec![1.0, 1.0]]);
        m[1][0].pass_us = 0.0;
        assert_eq!(slowdowns(&p, &m, &COSTS), None);
        assert_eq!(slowdowns(&p, &[], &COSTS), None);
        assert_eq!(rebalance(&p, &[], &COSTS, Schedule::OneFOneB, 2), None);
        assert_eq!(
            rebalance(&p, &[vec![1.0], vec![1.0]], &COSTS, Schedule::OneFOneB, 2),
            None,
            "a row per stage"
        );
    }

    #[test]
    fn shares_move_unit_by_unit_where_partitions_are_too_coarse() {
        // 4 replicas × 4 partitions of 4 units; replica 0's second stage 2×
        // slow: whole partitions could only give it 3 or 4 of 16
        let p = Placement::even(&[0, 2, 5], 4, (16, 4));
        let mut slow = vec![vec![1.0, 1.0]; 4];
        slow[0][1] = 2.0;
        let next = moved(&p, &slow, 1);
        let counts: Vec<usize> = next.units.iter().map(Vec::len).collect();
        assert_eq!(counts.iter().sum::<usize>(), 64);
        assert!(
            !counts[0].is_multiple_of(4) || counts[1..].iter().any(|c| !c.is_multiple_of(4)),
            "{counts:?}"
        );
        assert!(
            counts[0] < 16 && counts[1..].iter().all(|&c| c > 16),
            "{counts:?}"
        );
        let mut all = next.units.concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 64, "every unit once");
    }

    #[test]
    fn only_a_slowdown_seen_twice_in_a_row_moves_work() {
        let p = Placement::even(&[0, 2, 5], 2, (8, 1));
        let fine = seen(&p, &measure(&p, &[vec![1.0, 1.0], vec![1.0, 1.0]]));
        let slow = seen(&p, &measure(&p, &[vec![5.0, 1.0], vec![1.0, 1.0]]));
        let other = seen(&p, &measure(&p, &[vec![1.0, 1.0], vec![1.0, 5.0]]));
        assert_eq!(lasting(None, &slow), None, "nothing before the first");
        // a different worker slow each iteration: nothing lasts
        for (before, now) in [(&fine, &slow), (&slow, &other), (&slow, &fine)] {
            let acted = lasting(Some(before), now).expect("two iterations");
            assert_eq!(rebalance(&p, &acted, &COSTS, Schedule::OneFOneB, 2), None);
        }
        // the same worker slow twice: the work moves
        let acted = lasting(Some(&slow), &slow).expect("two iterations");
        assert!(rebalance(&p, &acted, &COSTS, Schedule::OneFOneB, 2).is_some());
        assert_eq!(lasting(Some(&slow[..1]), &slow), None, "shapes differ");
    }
}
