//! `proactive` (DPro-SM, Greyhound): before iteration t + 1 starts, move units
//! from the workers predicted to be slow to the ones predicted to be fast, so
//! the predicted makespan is minimal.
//!
//! The rule is a greedy longest-processing-time balance, not Greyhound's
//! least-squares objective: while the worker predicted to finish last can give
//! one of its own units to the worker that would then finish earliest, and that
//! move shortens the predicted makespan by more than `min_gain` of a unit, make
//! it. Every worker keeps at least `floor` of its own units (and at least one),
//! so its speed stays observed and a wrong prediction is corrected next time.
//!
//! `min_gain` is also the price of moving data: a receiver that does not hold
//! the unit's partition gets its rows shipped with the unit, and holds the
//! partition from then on (the owner sends units of partitions the receiver
//! already holds first), so a move has to pay for itself once.
//!
//! The plan is a pure function of the predicted times and the unit counts:
//! every worker computes the same plan from the same broadcast timings and
//! executes only its own row of it (the units it gives), so no unit can be
//! given twice or lost.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

/// Knobs of `proactive` (and of `forestall`'s proactive half).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProactiveConfig {
    /// Share of its own units every worker keeps, in [0, 1).
    pub floor: f64,
    /// A move must shorten the predicted makespan by more than this many of
    /// the receiver's predicted unit times.
    pub min_gain: f64,
}

/// Default share of its own units every worker keeps.
pub const DEFAULT_FLOOR: f64 = 0.1;

/// Default share of an iteration's units `proactive-clone` may clone.
pub const DEFAULT_CLONE_BUDGET: f64 = 0.25;

/// The first moves of `moves` whose counts add up to at most `budget` units
/// (the last one cut short).
pub fn within_budget(moves: &[Move], budget: u32) -> Vec<Move> {
    let mut left = budget;
    let mut out = Vec::new();
    for m in moves {
        let count = m.count.min(left);
        if count == 0 {
            break;
        }
        out.push(Move { count, ..*m });
        left -= count;
    }
    out
}

/// Default least gain of a move, in receiver unit times.
pub const DEFAULT_MIN_GAIN: f64 = 0.5;

impl Default for ProactiveConfig {
    fn default() -> Self {
        Self {
            floor: DEFAULT_FLOOR,
            min_gain: DEFAULT_MIN_GAIN,
        }
    }
}

/// `count` of `from`'s own units go to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Giver (the units' owner).
    pub from: u32,
    /// Receiver.
    pub to: u32,
    /// Units.
    pub count: u32,
}

/// The moves that balance `own[w]` units at a predicted `unit_us[w]` µs per
/// unit (`None`: no prediction — the worker neither gives nor takes). Moves are
/// listed by giver, then receiver.
pub fn plan_moves(own: &[u32], unit_us: &[Option<f64>], config: &ProactiveConfig) -> Vec<Move> {
    let n = own.len().min(unit_us.len());
    let workers: Vec<Load> = own[..n]
        .iter()
        .map(|&u| Load {
            start_us: 0.0,
            units: u,
            givable: u,
            keep: ((f64::from(u) * config.floor).ceil() as u32).clamp(1.min(u), u),
        })
        .collect();
    balance_moves(&workers, &unit_us[..n], config.min_gain, false)
}

/// Every worker's units once `moves` are made on `own`, by worker.
pub fn lists_after(own: &[u32], moves: &[Move]) -> Vec<u32> {
    let mut lists = own.to_vec();
    for m in moves {
        if let Some(from) = lists.get_mut(m.from as usize) {
            *from = from.saturating_sub(m.count);
        }
        if let Some(to) = lists.get_mut(m.to as usize) {
            *to += m.count;
        }
    }
    lists
}

/// One worker's load for [`balance_moves`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// When it starts on `units`, µs (any common origin).
    pub start_us: f64,
    /// Units it has to compute.
    pub units: u32,
    /// Of those, its own units it may give (the end of its list).
    pub givable: u32,
    /// Of `givable`, how many it keeps at least.
    pub keep: u32,
}

/// The moves that make the workers' loads finish earliest: worker `w`
/// finishes at `start_us + units · unit_us[w]`; a move gives one of a
/// giver's `givable` units (beyond `keep`) to the worker that would then
/// finish earliest, while that shortens the makespan by more than
/// `min_gain` of the receiver's unit. Among receivers that would finish
/// together, the lowest index first, or, with `spread`, in an order spread
/// over the ring of workers (`spread`). Moves are listed by giver, then
/// receiver.
pub fn balance_moves(
    workers: &[Load],
    unit_us: &[Option<f64>],
    min_gain: f64,
    spread: bool,
) -> Vec<Move> {
    let order = |w: usize| if spread { self::spread(w) } else { w as u64 };
    let n = workers.len().min(unit_us.len());
    let speed: Vec<Option<f64>> = unit_us[..n]
        .iter()
        .map(|t| t.filter(|t| t.is_finite() && *t > 0.0))
        .collect();
    let keep: Vec<u32> = workers[..n].iter().map(|l| l.keep).collect();
    let start: Vec<f64> = workers[..n].iter().map(|l| l.start_us.max(0.0)).collect();
    let mut count: Vec<u32> = workers[..n].iter().map(|l| l.units).collect();
    // Own units still here (only these can be given).
    let mut own_left: Vec<u32> = workers[..n].iter().map(|l| l.givable).collect();
    let finish = |w: usize, c: &[u32]| speed[w].map_or(0.0, |t| start[w] + f64::from(c[w]) * t);
    // Finish times are ≥ 0, so their bits order like the numbers. Heaps with
    // lazy deletion (an entry is stale when it no longer matches) keep each
    // step O(log n) at thousands of workers.
    let bits = |x: f64| x.to_bits();
    let mut latest: BinaryHeap<(u64, Reverse<usize>)> = (0..n)
        .map(|w| (bits(finish(w, &count)), Reverse(w)))
        .collect();
    let can_give = |w: usize, left: &[u32]| speed[w].is_some() && left[w] > keep[w];
    let mut givers: BinaryHeap<(u64, Reverse<usize>)> = (0..n)
        .filter(|&w| can_give(w, &own_left))
        .map(|w| (bits(finish(w, &count)), Reverse(w)))
        .collect();
    let mut takers: BinaryHeap<Reverse<(u64, u64, usize)>> = (0..n)
        .filter_map(|w| speed[w].map(|t| Reverse((bits(finish(w, &count) + t), order(w), w))))
        .collect();
    // Every unit moved, as (giver, receiver): counted by pair at the end.
    let mut moved: Vec<(u32, u32)> = Vec::new();
    loop {
        // The worker predicted to finish last among those that can still give.
        let slow = loop {
            match givers.peek() {
                None => break None,
                Some(&(f, Reverse(w)))
                    if f == bits(finish(w, &count)) && can_give(w, &own_left) =>
                {
                    break Some(w)
                }
                Some(_) => {
                    givers.pop();
                }
            }
        };
        let Some(slow) = slow else { break };
        let makespan = loop {
            let &(f, Reverse(w)) = latest.peek().expect("every worker has an entry");
            if f == bits(finish(w, &count)) {
                break f64::from_bits(f);
            }
            latest.pop();
        };
        if finish(slow, &count) < makespan {
            break; // the last to finish cannot give: nothing shortens the makespan
        }
        // The receiver that would finish earliest with one more unit.
        let mut set_aside = Vec::new();
        let fast = loop {
            match takers.peek() {
                None => break None,
                Some(&Reverse((f, _, w))) => {
                    let t = speed[w].unwrap_or(0.0);
                    if f != bits(finish(w, &count) + t) {
                        takers.pop();
                    } else if w == slow {
                        set_aside.extend(takers.pop());
                    } else {
                        break Some((w, t));
                    }
                }
            }
        };
        takers.extend(set_aside);
        let Some((fast, t_fast)) = fast else { break };
        let t_slow = speed[slow].unwrap_or(0.0);
        let after = (finish(slow, &count) - t_slow).max(finish(fast, &count) + t_fast);
        if makespan - after <= min_gain * t_fast {
            break;
        }
        count[slow] -= 1;
        own_left[slow] -= 1;
        count[fast] += 1;
        moved.push((slow as u32, fast as u32));
        for w in [slow, fast] {
            let f = finish(w, &count);
            latest.push((bits(f), Reverse(w)));
            if can_give(w, &own_left) {
                givers.push((bits(f), Reverse(w)));
            }
            takers.push(Reverse((bits(f + speed[w].unwrap_or(0.0)), order(w), w)));
        }
    }
    moved.sort_unstable();
    let mut moves: Vec<Move> = Vec::new();
    for (from, to) in moved {
        match moves.last_mut() {
            Some(m) if (m.from, m.to) == (from, to) => m.count += 1,
            _ => moves.push(Move { from, to, count: 1 }),
        }
    }
    moves
}

/// Where worker `w` comes among receivers that would finish together, when
/// [`balance_moves`] spreads them: an order spread over the ring of workers
/// (a fixed permutation, Fibonacci hashing), so units moved off slow
/// workers land far apart rather than on the workers next to each other,
/// whose helper groups would then all be loaded alike, with no idle
/// neighbour to take the tails of their last units. (With whole units the
/// neighbours' order did better: 1.184× against 1.191× the bound at 10,000
/// workers, and a faster replay.)
fn spread(w: usize) -> u64 {
    (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The order of a giver's own `units` before it executes its row of the plan.
///
/// `gifts` are the giver's moves in the order they are sent; each takes its
/// `count` units from the end of the list. So each gift's units are put at the
/// end, the first gift's last: first the units of partitions the receiver
/// already holds (`holds(partition, receiver)`, from the end of the list, so
/// their rows need not travel), then, if too few, the units that are last in
/// what is left. Units no gift takes keep their order at the front.
pub fn order_for_gifts<T>(
    mut units: Vec<T>,
    partition: impl Fn(&T) -> u32,
    gifts: &[Move],
    holds: impl Fn(u32, u32) -> bool,
) -> Vec<T> {
    let mut tail: Vec<T> = Vec::new();
    for gift in gifts {
        let count = gift.count as usize;
        let mut picked = Vec::with_capacity(count);
        // Descending, so removing one does not shift the next.
        let held: Vec<usize> = (0..units.len())
            .rev()
            .filter(|&i| holds(partition(&units[i]), gift.to))
            .take(count)
            .collect();
        for i in held {
            picked.push(units.remove(i));
        }
        while picked.len() < count {
            match units.pop() {
                Some(u) => picked.push(u),
                None => break,
            }
        }
        picked.reverse();
        tail.splice(0..0, picked);
    }
    units.extend(tail);
    units
}

/// The predicted makespan of `own` units per worker after `moves`.
pub fn predicted_makespan(own: &[u32], unit_us: &[Option<f64>], moves: &[Move]) -> f64 {
    let mut count: Vec<i64> = own.iter().map(|&u| i64::from(u)).collect();
    for m in moves {
        count[m.from as usize] -= i64::from(m.count);
        count[m.to as usize] += i64::from(m.count);
    }
    count
        .iter()
        .zip(unit_us)
        .map(|(&c, t)| c as f64 * t.unwrap_or(0.0))
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(moves: &[Move], w: u32) -> i64 {
        moves
            .iter()
            .map(|m| {
                if m.from == w {
                    -i64::from(m.count)
                } else if m.to == w {
                    i64::from(m.count)
                } else {
                    0
                }
            })
            .sum()
    }

    #[test]
    fn a_slow_worker_gives_work_to_the_fast_ones_in_proportion_to_speed() {
        // 4 workers × 20 units; worker 3 takes 4× as long per unit.
        let own = [20, 20, 20, 20];
        let t = [Some(100.0), Some(100.0), Some(100.0), Some(400.0)];
        let moves = plan_moves(&own, &t, &ProactiveConfig::default());
        assert!(moves.iter().all(|m| m.from == 3), "{moves:?}");
        // Balanced: total work = 80 units at speeds 1,1,1,¼ → each fast worker
        // ≈ 24.6 units, the slow one ≈ 6.2 (bound 2462 µs).
        let span = predicted_makespan(&own, &t, &moves);
        assert!(span <= 2600.0, "{span} {moves:?}");
        assert!(predicted_makespan(&own, &t, &[]) == 8000.0);
        assert_eq!(
            given(&moves, 3) + given(&moves, 0) + given(&moves, 1) + given(&moves, 2),
            0
        );
    }

    #[test]
    fn the_lists_after_a_plan_keep_every_unit() {
        let own = [20, 20, 20, 20];
        let t = [Some(100.0), Some(100.0), Some(100.0), Some(400.0)];
        let moves = plan_moves(&own, &t, &ProactiveConfig::default());
        let lists = lists_after(&own, &moves);
        assert_eq!(lists.iter().sum::<u32>(), 80);
        for w in 0..4u32 {
            assert_eq!(i64::from(lists[w as usize]), 20 + given(&moves, w));
        }
        assert!(lists[3] < 10, "{lists:?}");
        assert_eq!(lists_after(&own, &[]), own.to_vec());
    }

    #[test]
    fn a_budget_cuts_the_plan_short() {
        let moves = [
            Move {
                from: 3,
                to: 0,
                count: 4,
            },
            Move {
                from: 3,
                to: 1,
                count: 4,
            },
        ];
        assert_eq!(
            within_budget(&moves, 6),
            vec![
                Move {
                    from: 3,
                    to: 0,
                    count: 4
                },
                Move {
                    from: 3,
                    to: 1,
                    count: 2
                }
            ]
        );
        assert!(within_budget(&moves, 0).is_empty());
        assert_eq!(within_budget(&moves, 100), moves.to_vec());
    }

    /// A unit as (partition, unit).
    type Unit = (u32, u32);

    /// What every gift got, and what is left.
    struct Dealt {
        gifts: Vec<Vec<Unit>>,
        kept: Vec<Unit>,
    }

    fn gift(to: u32, count: u32) -> Move {
        Move { from: 9, to, count }
    }

    /// Executes `gifts` on `order` as the worker does: each takes its count
    /// from the end of the list.
    fn deal(mut order: Vec<Unit>, gifts: &[Move]) -> Dealt {
        let dealt = gifts
            .iter()
            .map(|g| {
                let mut taken: Vec<Unit> = (0..g.count).filter_map(|_| order.pop()).collect();
                taken.reverse();
                taken
            })
            .collect();
        Dealt {
            gifts: dealt,
            kept: order,
        }
    }

    /// Units are (partition, unit); `held` lists (partition, receiver).
    fn order(units: &[Unit], gifts: &[Move], held: &[Unit]) -> Vec<Unit> {
        order_for_gifts(
            units.to_vec(),
            |u| u.0,
            gifts,
            |p, w| held.contains(&(p, w)),
        )
    }

    #[test]
    fn without_gifts_the_order_stays() {
        let units = [(0, 0), (0, 1), (1, 0)];
        assert_eq!(order(&units, &[], &[(0, 1)]), units.to_vec());
        assert!(order(&[], &[gift(1, 3)], &[]).is_empty());
    }

    #[test]
    fn a_receiver_gets_the_units_of_partitions_it_holds() {
        let units = [(0, 0), (0, 1), (1, 0), (1, 1)];
        let gifts = [gift(1, 2)];
        let ordered = order(&units, &gifts, &[(0, 1)]);
        assert_eq!(ordered, vec![(1, 0), (1, 1), (0, 0), (0, 1)]);
        let Dealt { gifts: dealt, kept } = deal(ordered, &gifts);
        assert_eq!(dealt, vec![vec![(0, 0), (0, 1)]]);
        assert_eq!(kept, vec![(1, 0), (1, 1)]);
    }

    #[test]
    fn the_first_gift_takes_the_last_units() {
        let units = [(0, 0), (1, 0), (2, 0), (2, 1)];
        // worker 1 holds partition 0, worker 2 partition 1
        let gifts = [gift(1, 1), gift(2, 1)];
        let ordered = order(&units, &gifts, &[(0, 1), (1, 2)]);
        assert_eq!(ordered, vec![(2, 0), (2, 1), (1, 0), (0, 0)]);
        let Dealt { gifts: dealt, kept } = deal(ordered, &gifts);
        assert_eq!(dealt, vec![vec![(0, 0)], vec![(1, 0)]]);
        assert_eq!(kept, vec![(2, 0), (2, 1)]);
    }

    #[test]
    fn too_few_held_units_are_made_up_from_the_end() {
        // the receiver holds nothing: the last units go, in their order
        let units = [(0, 0), (0, 1), (1, 0)];
        assert_eq!(order(&units, &[gift(1, 2)], &[]), units.to_vec());
        // it holds one unit's partition: that one, then the last two others
        let units = [(0, 0), (1, 0), (1, 1), (2, 0)];
        let ordered = order(&units, &[gift(1, 3)], &[(0, 1)]);
        assert_eq!(ordered, vec![(1, 0), (1, 1), (2, 0), (0, 0)]);
        let Dealt { gifts: dealt, kept } = deal(ordered, &[gift(1, 3)]);
        assert_eq!(dealt, vec![vec![(1, 1), (2, 0), (0, 0)]]);
        assert_eq!(kept, vec![(1, 0)]);
        // a gift larger than the list takes everything
        let Dealt { gifts: dealt, kept } =
            deal(order(&units, &[gift(1, 9)], &[(1, 1)]), &[gift(1, 9)]);
        assert_eq!(dealt[0].len(), 4);
        assert!(kept.is_empty());
    }

    #[test]
    fn held_units_go_only_to_the_receiver_that_holds_them() {
        // both receivers hold partition 0; the first gift takes it, the
        // second makes do with the end of what is left
        let units = [(0, 0), (1, 0), (1, 1), (1, 2)];
        let gifts = [gift(1, 1), gift(2, 2)];
        let Dealt { gifts: dealt, kept } = deal(order(&units, &gifts, &[(0, 1), (0, 2)]), &gifts);
        assert_eq!(dealt, vec![vec![(0, 0)], vec![(1, 1), (1, 2)]]);
        assert_eq!(kept, vec![(1, 0)]);
    }

    #[test]
    fn equal_predictions_move_nothing() {
        let t = [Some(100.0); 4];
        assert!(plan_moves(&[10; 4], &t, &ProactiveConfig::default()).is_empty());
        // Within the gain threshold (one unit's worth of imbalance): nothing.
        let t = [Some(100.0), Some(100.0), Some(100.0), Some(104.0)];
        assert!(plan_moves(&[10; 4], &t, &ProactiveConfig::default()).is_empty());
    }

    #[test]
    fn every_worker_keeps_its_floor() {
        let own = [10, 10];
        let t = [Some(1.0), Some(1000.0)];
        let config = ProactiveConfig {
            floor: 0.2,
            min_gain: 0.0,
        };
        let moves = plan_moves(&own, &t, &config);
        assert_eq!(
            moves,
            vec![Move {
                from: 1,
                to: 0,
                count: 8
            }]
        );
        // A floor of 0 still keeps one unit.
        let moves = plan_moves(
            &own,
            &t,
            &ProactiveConfig {
                floor: 0.0,
                ..config
            },
        );
        assert_eq!(
            moves,
            vec![Move {
                from: 1,
                to: 0,
                count: 9
            }]
        );
    }

    #[test]
    fn workers_without_a_prediction_neither_give_nor_take() {
        let own = [10, 10, 10];
        let t = [None, Some(100.0), Some(300.0)];
        let moves = plan_moves(&own, &t, &ProactiveConfig::default());
        assert!(moves.iter().all(|m| m.from == 2 && m.to == 1), "{moves:?}");
        let nan = [Some(f64::NAN), Some(100.0), Some(300.0)];
        assert_eq!(plan_moves(&own, &nan, &ProactiveConfig::default()), moves);
        assert!(plan_moves(&[], &[], &ProactiveConfig::default()).is_empty());
    }
}
