//! A parameter shard's owner: collects each unit's gradient slice exactly once,
//! reduces in partition order, and steps the optimiser.
//!
//! The reduction is `Σ_p (Σ_u g[p,u])`, each sum a left fold in index order,
//! coordinate by coordinate, so the result does not depend on which worker
//! computed a unit, in which order slices arrived, or how coordinates are
//! sharded. A unit whose tail a peer computed arrives in pieces: they are
//! held until they cover the unit, then folded in row order (the first
//! piece's sums, then each later micro-batch's), the same additions in the
//! same order as the unit computed whole.

use std::collections::BTreeMap;
use std::ops::Range;

use super::messages::GradSlice;
use crate::workload::{Optimizer, OptimizerConfig, Update};

/// What became of an offered slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// First copy of this unit for its iteration: counted.
    Accepted,
    /// The unit was already counted (a clone's twin or a late copy): discarded.
    Duplicate,
}

/// What became of a piece of a unit at its shard's owner.
enum Joined {
    /// Held until the other pieces come.
    Held,
    /// That piece was here already.
    Duplicate,
    /// The last piece: the unit's slice, whole.
    Whole(Box<GradSlice>),
}

/// One iteration's reduced result for the shard.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduced {
    /// The new values of the shard's coordinates (version `iteration + 1`).
    pub values: Vec<f64>,
    /// Σ of the units' loss sums, folded in the same order (shard 0 only).
    pub loss_sum: f64,
    /// Rows the reduction included (all of the iteration's under BSP).
    pub rows: f64,
}

/// One unit's contribution to the shard's reduction.
#[derive(Debug, Clone)]
struct UnitGrad {
    /// The unit's gradient sum over the shard's coordinates.
    update: Update,
    /// Σ of the unit's row losses (shard 0 only).
    loss_sum: f64,
    /// Rows in the unit.
    rows: u32,
}

#[derive(Debug)]
struct Slots {
    grads: Vec<Option<UnitGrad>>,
    filled: usize,
    /// Units received per owner (backup workers).
    per_owner: Vec<u32>,
    /// Owners whose units have all arrived, in the order they completed.
    completed: Vec<u32>,
    /// Partitions the reduction includes, once decided (backup workers).
    included: Option<Vec<bool>>,
}

/// Backup workers (Chen et al., 2016): reduce the gradients of the first
/// `keep` workers to deliver all their units and drop the others'.
#[derive(Debug, Clone)]
pub struct BackupRule {
    /// How many workers' gradients are kept (N − b).
    pub keep: u32,
    /// Owner of each partition.
    pub owners: Vec<u32>,
    /// Units each worker owns per iteration.
    pub units_per_owner: Vec<u32>,
}

/// State of one parameter shard at its owner.
#[derive(Debug)]
pub struct ShardReducer {
    range: Range<usize>,
    partitions: u32,
    units_per_partition: u32,
    rows_per_iteration: f64,
    values: Vec<f64>,
    adam: Optimizer,
    pending: BTreeMap<u64, Slots>,
    reduced_through: Option<u64>,
    duplicates: u64,
    backup: Option<BackupRule>,
    /// dpro-substitute: every unit's last reduced gradient, loss and rows.
    last: Option<Vec<Option<UnitGrad>>>,
    /// dpro-substitute: partitions with substituted units, per iteration.
    substituted: BTreeMap<u64, std::collections::BTreeSet<u32>>,
    /// Pieces of units, by (iteration, unit index), until they cover it.
    pieces: BTreeMap<(u64, usize), Vec<GradSlice>>,
}

fn slots_substituted(
    substituted: &mut BTreeMap<u64, std::collections::BTreeSet<u32>>,
    iteration: u64,
    partition: u32,
) {
    substituted.entry(iteration).or_default().insert(partition);
}

impl ShardReducer {
    /// The owner of coordinates `range`, starting from `initial` (the shard's
    /// slice of version 0); `penalised` marks the coordinates with L2 penalty.
    pub fn new(
        range: Range<usize>,
        partitions: u32,
        units_per_partition: u32,
        rows_per_iteration: u64,
        optimizer: OptimizerConfig,
        initial: Vec<f64>,
        penalised: Vec<bool>,
    ) -> Self {
        assert_eq!(initial.len(), range.len(), "initial values cover the shard");
        Self {
            values: initial,
            adam: Optimizer::new(optimizer, penalised),
            range,
            partitions,
            units_per_partition,
            rows_per_iteration: rows_per_iteration as f64,
            pending: BTreeMap::new(),
            reduced_through: None,
            duplicates: 0,
            backup: None,
            last: None,
            substituted: BTreeMap::new(),
            pieces: BTreeMap::new(),
        }
    }

    /// Continues from a checkpoint of parameter version `version`: the values
    /// given to [`ShardReducer::new`] are that version's, `m`, `v` and `steps`
    /// the optimiser's state, and the next iteration reduced is `version`.
    pub fn resume_at(mut self, version: u64, m: &[f64], v: &[f64], steps: i32) -> Self {
        self.adam.restore(m, v, steps);
        self.reduced_through = version.checked_sub(1);
        self
    }

    /// The shard's state after the iterations reduced so far, for a
    /// checkpoint of parameter version `version`.
    pub fn checkpoint_state(&self, version: u64, shard: u32) -> crate::checkpoint::ShardState {
        let (m, v, steps) = self.adam.state();
        crate::checkpoint::ShardState {
            iteration: version,
            shard,
            start: self.range.start,
            values: self.values.clone(),
            m: m.to_vec(),
            v: v.to_vec(),
            steps,
        }
    }

    /// Keeps every unit's last gradient, for substitution (dpro-substitute).
    pub fn with_substitution(mut self) -> Self {
        self.last = Some(vec![
            None;
            (self.partitions * self.units_per_partition) as usize
        ]);
        self
    }

    /// The partitions of `iteration` whose units were substituted (taken once).
    pub fn take_substituted(&mut self, iteration: u64) -> Vec<u32> {
        self.substituted
            .remove(&iteration)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default()
    }

    /// Reduces only what the first `rule.keep` workers deliver (lossy).
    pub fn with_backup(mut self, rule: BackupRule) -> Self {
        self.backup = Some(rule);
        self
    }

    fn slots(&mut self, iteration: u64) -> &mut Slots {
        let units = (self.partitions * self.units_per_partition) as usize;
        let owners = self.backup.as_ref().map_or(0, |b| b.units_per_owner.len());
        self.pending.entry(iteration).or_insert_with(|| Slots {
            grads: vec![None; units],
            filled: 0,
            per_owner: vec![0; owners],
            completed: Vec::new(),
            included: None,
        })
    }

    /// Shard 0's owner decides, once the first `keep` workers have delivered all
    /// their units, which partitions iteration `t` includes; returns the dropped
    /// partitions when it decides (once).
    pub fn decide(&mut self, iteration: u64) -> Option<Vec<u32>> {
        let rule = self.backup.clone()?;
        let slots = self.pending.get_mut(&iteration)?;
        if slots.included.is_some() || (slots.completed.len() as u32) < rule.keep {
            return None;
        }
        let kept = &slots.completed[..rule.keep as usize];
        let included: Vec<bool> = rule.owners.iter().map(|o| kept.contains(o)).collect();
        let dropped = (0..rule.owners.len() as u32)
            .filter(|&p| !included[p as usize])
            .collect();
        slots.included = Some(included);
        Some(dropped)
    }

    /// Takes shard 0's decision for `iteration`: these partitions are dropped.
    pub fn set_dropped(&mut self, iteration: u64, dropped: &[u32]) {
        if self.reduced_through.is_some_and(|r| iteration <= r) {
            return;
        }
        let partitions = self.partitions as usize;
        let slots = self.slots(iteration);
        let mut included = vec![true; partitions];
        for &p in dropped {
            included[p as usize] = false;
        }
        slots.included = Some(included);
    }

    /// The coordinates this shard covers.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// Slices discarded as duplicates so far.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Takes a slice into its iteration's slot, unless that unit is already
    /// there; a piece of a unit is held until the pieces cover it.
    pub fn offer(&mut self, slice: GradSlice) -> Offer {
        if self.reduced_through.is_some_and(|r| slice.iteration <= r) {
            self.duplicates += 1;
            return Offer::Duplicate;
        }
        let index = (slice.partition * self.units_per_partition + slice.unit) as usize;
        let slice = match slice.piece.is_some() {
            true => match self.join_piece(index, slice) {
                Joined::Held => return Offer::Accepted,
                Joined::Duplicate => {
                    self.duplicates += 1;
                    return Offer::Duplicate;
                }
                Joined::Whole(whole) => *whole,
            },
            false => slice,
        };
        let owner = self.backup.as_ref().map(|b| {
            (
                b.owners[slice.partition as usize],
                b.units_per_owner.clone(),
            )
        });
        if self.slots(slice.iteration).grads[index].is_some() {
            self.duplicates += 1;
            return Offer::Duplicate;
        }
        let entry = if slice.substitute {
            slots_substituted(&mut self.substituted, slice.iteration, slice.partition);
            // The unit's last reduced gradient (none yet: it adds nothing).
            self.last
                .as_ref()
                .and_then(|l| l[index].clone())
                .unwrap_or_else(|| UnitGrad {
                    update: Update::zero(),
                    loss_sum: 0.0,
                    rows: 0,
                })
        } else {
            UnitGrad {
                update: slice.update,
                loss_sum: slice.loss_sum,
                rows: slice.rows,
            }
        };
        let slots = self.slots(slice.iteration);
        slots.grads[index] = Some(entry);
        slots.filled += 1;
        if let Some((o, totals)) = owner {
            slots.per_owner[o as usize] += 1;
            if slots.per_owner[o as usize] == totals[o as usize] {
                slots.completed.push(o);
            }
        }
        Offer::Accepted
    }

    /// Holds piece `slice` of unit `index`; once the pieces cover the unit,
    /// the whole unit's slice: the first piece's sums with every later
    /// micro-batch's folded in, in row order.
    fn join_piece(&mut self, index: usize, slice: GradSlice) -> Joined {
        let Some(piece) = slice.piece.as_ref().map(|p| p.piece) else {
            return Joined::Whole(Box::new(slice));
        };
        let key = (slice.iteration, index);
        if self.slots(slice.iteration).grads[index].is_some() {
            return Joined::Duplicate;
        }
        let held = self.pieces.entry(key).or_default();
        let first = |s: &GradSlice| s.piece.as_ref().map_or(0, |p| p.piece.first_row);
        if held.iter().any(|s| first(s) == piece.first_row) {
            return Joined::Duplicate;
        }
        held.push(slice);
        let covered: u32 = held.iter().map(|s| s.rows).sum();
        if covered < piece.unit_rows {
            return Joined::Held;
        }
        let mut held = self.pieces.remove(&key).unwrap_or_default();
        held.sort_by_key(first);
        let mut held = held.into_iter();
        let Some(mut whole) = held.next() else {
            return Joined::Held;
        };
        let dims = self.values.len();
        let mut end = whole.rows;
        for later in held {
            debug_assert_eq!(first(&later), end, "pieces follow each other");
            end += later.rows;
            for (update, loss) in later.piece.map(|p| p.micro).unwrap_or_default() {
                whole.update.add(&update, dims);
                whole.loss_sum += loss;
            }
        }
        whole.rows = end;
        whole.piece = None;
        Joined::Whole(Box::new(whole))
    }

    /// Whether every unit of `iteration` has arrived.
    pub fn is_complete(&self, iteration: u64) -> bool {
        let upp = self.units_per_partition as usize;
        self.pending
            .get(&iteration)
            .is_some_and(|s| match &s.included {
                None => self.backup.is_none() && s.filled == s.grads.len(),
                Some(included) => s
                    .grads
                    .iter()
                    .enumerate()
                    .all(|(i, g)| !included[i / upp] || g.is_some()),
            })
    }

    /// Reduces `iteration` in partition order and steps the optimiser, if every
    /// unit has arrived; iterations must be reduced in order.
    pub fn try_reduce(&mut self, iteration: u64) -> Option<Reduced> {
        if !self.is_complete(iteration) {
            return None;
        }
        debug_assert_eq!(
            self.reduced_through.map_or(0, |r| r + 1),
            iteration,
            "iterations are reduced in order"
        );
        let slots = self.pending.remove(&iteration)?;
        let mut total = vec![0.0; self.values.len()];
        let mut loss_sum = 0.0;
        let mut rows = 0u64;
        if let Some(last) = self.last.as_mut() {
            for (l, g) in last.iter_mut().zip(&slots.grads) {
                if g.is_some() {
                    l.clone_from(g);
                }
            }
        }
        let mut grads = slots.grads.into_iter();
        // Each partition's units summed in unit order, then the partitions'
        // sums in partition order (the spare buffer holds a partition's sum).
        let mut partial = Vec::new();
        for p in 0..self.partitions as usize {
            let keep = slots.included.as_ref().is_none_or(|inc| inc[p]);
            let units: Vec<Option<UnitGrad>> = (0..self.units_per_partition)
                .map(|_| grads.next().flatten())
                .collect();
            if !keep {
                continue;
            }
            let mut partial_loss = 0.0;
            match units.as_slice() {
                // One dense unit: added straight into the total. The same
                // bits as through a zeroed partial sum: 0 + x differs from x
                // only for x = −0, and t + (+0) = t + (−0) for every t the
                // total can hold (it starts at +0, so it is never −0).
                [Some(unit)] if unit.update.is_dense() => {
                    unit.update.add_into(&mut total);
                    partial_loss += unit.loss_sum;
                    rows += u64::from(unit.rows);
                }
                _ => {
                    partial.clear();
                    partial.resize(self.values.len(), 0.0);
                    for unit in units {
                        let unit = unit?;
                        unit.update.add_into(&mut partial);
                        partial_loss += unit.loss_sum;
                        rows += u64::from(unit.rows);
                    }
                    for (acc, x) in total.iter_mut().zip(&partial) {
                        *acc += x;
                    }
                }
            }
            loss_sum += partial_loss;
        }
        // Under BSP every unit is in, and the divisor is the fixed row count.
        let divisor = match slots.included {
            None => self.rows_per_iteration,
            Some(_) => rows.max(1) as f64,
        };
        self.adam.step(&mut self.values, &total, divisor);
        self.reduced_through = Some(iteration);
        Some(Reduced {
            values: self.values.clone(),
            loss_sum,
            rows: divisor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::messages::PieceSums;

    fn config() -> OptimizerConfig {
        OptimizerConfig {
            kind: crate::workload::OptimizerKind::Adam,
            learning_rate: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            l2: 0.0,
        }
    }

    fn slice(iteration: u64, partition: u32, unit: u32, values: Vec<f64>) -> GradSlice {
        GradSlice {
            owner: 0,
            iteration,
            partition,
            unit,
            executor: 0,
            rows: 1,
            loss_sum: values[0],
            update: Update::Dense(values),
            substitute: false,
            stop_at: None,
            sent_us: 0,
            span: None,
            piece: None,
        }
    }

    /// Values chosen so that float addition order matters: 1e16 + 1 - 1e16.
    fn grads() -> Vec<(u32, u32, Vec<f64>)> {
        vec![
            (0, 0, vec![1e16, 0.1]),
            (0, 1, vec![1.0, 0.2]),
            (1, 0, vec![-1e16, 0.3]),
            (1, 1, vec![1.0, 1e-17]),
        ]
    }

    /// Unit (0, 0) of 4 rows in micro-batches of one row, whose values make
    /// the order of additions matter: computed whole (a left fold from
    /// zero), or as a first piece of 2 rows and tails of 1, in every order
    /// of arrival, the owner reduces the same bits; a piece sent twice is a
    /// duplicate.
    #[test]
    fn pieces_of_a_unit_fold_to_the_whole_units_bits() {
        let micro = [[1e16, 0.1], [1.0, 0.2], [-1e16, 0.3], [1.0, 1e-17]];
        let fold = |rows: &[[f64; 2]]| {
            let mut acc = Update::zero();
            let mut loss = 0.0;
            for m in rows {
                acc.add(&Update::Dense(m.to_vec()), 2);
                loss += m[0];
            }
            (acc, loss)
        };
        let piece = |first_row: u32, micro: Vec<(Update, f64)>| PieceSums {
            piece: crate::run::messages::Piece {
                first_row,
                unit_rows: 4,
            },
            micro,
        };
        let (head, head_loss) = fold(&micro[..2]);
        let pieces = [
            GradSlice {
                rows: 2,
                loss_sum: head_loss,
                update: head,
                piece: Some(piece(0, Vec::new())),
                ..slice(0, 0, 0, vec![0.0])
            },
            GradSlice {
                update: Update::zero(),
                piece: Some(piece(
                    2,
                    vec![(Update::Dense(micro[2].to_vec()), micro[2][0])],
                )),
                ..slice(0, 0, 0, vec![0.0])
            },
            GradSlice {
                update: Update::zero(),
                piece: Some(piece(
                    3,
                    vec![(Update::Dense(micro[3].to_vec()), micro[3][0])],
                )),
                ..slice(0, 0, 0, vec![0.0])
            },
        ];
        let reducer = || ShardReducer::new(0..2, 1, 1, 4, config(), vec![0.0; 2], vec![false; 2]);
        let (whole, loss) = fold(&micro);
        let mut r = reducer();
        r.offer(GradSlice {
            rows: 4,
            loss_sum: loss,
            update: whole,
            ..slice(0, 0, 0, vec![0.0])
        });
        let expected = r.try_reduce(0).expect("one unit, in");
        for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2], [2, 0, 1]] {
            let mut r = reducer();
            for (k, &i) in order.iter().enumerate() {
                assert!(
                    r.try_reduce(0).is_none(),
                    "not before every piece ({order:?}, {k})"
                );
                assert_eq!(r.offer(pieces[i].clone()), Offer::Accepted);
            }
            assert_eq!(r.offer(pieces[order[0]].clone()), Offer::Duplicate);
            assert_eq!(r.try_reduce(0), Some(expected.clone()), "{order:?}");
        }
        let mut r = reducer();
        r.offer(pieces[1].clone());
        assert_eq!(
            r.offer(pieces[1].clone()),
            Offer::Duplicate,
            "a tail sent twice"
        );
    }

    #[test]
    fn arrival_order_does_not_change_the_bits() {
        let mut first: Option<Reduced> = None;
        let orders: [[usize; 4]; 4] = [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]];
        for order in orders {
            let mut r = ShardReducer::new(0..2, 2, 2, 4, config(), vec![0.0; 2], vec![false, true]);
            for &i in &order {
                let (p, u, g) = grads()[i].clone();
                assert!(r.try_reduce(0).is_none());
                assert_eq!(r.offer(slice(0, p, u, g)), Offer::Accepted);
            }
            let out = r.try_reduce(0).expect("complete");
            match &first {
                None => first = Some(out),
                Some(f) => {
                    assert_eq!(f.values[0].to_bits(), out.values[0].to_bits());
                    assert_eq!(f.values[1].to_bits(), out.values[1].to_bits());
                    assert_eq!(f.loss_sum.to_bits(), out.loss_sum.to_bits());
                }
            }
        }
    }

    /// A partition of one dense unit is added straight into the total; the
    /// same units, each with an empty second unit in its partition (summed
    /// through a zeroed partial sum), reduce to the same bits, over values
    /// where the order of additions matters, signed zeros, infinities and
    /// NaN, through several steps.
    #[test]
    fn one_dense_unit_a_partition_reduces_to_the_partial_sums_bits() {
        let units = [
            vec![1e16, 0.1, -0.0, 0.0, f64::INFINITY, 3.0],
            vec![1.0, 0.2, -0.0, -0.0, 1.0, f64::NAN],
            vec![-1e16, 0.3, 0.0, -0.0, -2.0, 1.0],
        ];
        let n = units[0].len();
        let penalised = vec![true; n];
        let mut direct =
            ShardReducer::new(0..n, 3, 1, 12, config(), vec![0.5; n], penalised.clone());
        let mut through = ShardReducer::new(0..n, 3, 2, 12, config(), vec![0.5; n], penalised);
        for t in 0..3u64 {
            for (p, g) in units.iter().enumerate() {
                let scaled: Vec<f64> = g.iter().map(|x| x * (t + 1) as f64).collect();
                direct.offer(slice(t, p as u32, 0, scaled.clone()));
                through.offer(slice(t, p as u32, 0, scaled));
                let empty = GradSlice {
                    update: Update::zero(),
                    rows: 0,
                    loss_sum: 0.0,
                    ..slice(t, p as u32, 1, vec![0.0])
                };
                through.offer(empty);
            }
            let (a, b) = (direct.try_reduce(t), through.try_reduce(t));
            let (a, b) = (a.expect("complete"), b.expect("complete"));
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a.values), bits(&b.values), "step {t}");
            assert_eq!(a.loss_sum.to_bits(), b.loss_sum.to_bits());
        }
    }

    #[test]
    fn a_substituted_unit_reuses_its_last_gradient() {
        let mut r = ShardReducer::new(0..2, 2, 2, 4, config(), vec![0.0; 2], vec![false, true])
            .with_substitution();
        let mut plain = ShardReducer::new(0..2, 2, 2, 4, config(), vec![0.0; 2], vec![false, true]);
        for (p, u, g) in grads() {
            r.offer(slice(0, p, u, g.clone()));
            plain.offer(slice(0, p, u, g));
        }
        r.try_reduce(0).expect("complete");
        plain.try_reduce(0).expect("complete");
        // iteration 1: unit (1, 1) is substituted by its iteration-0 gradient
        for (p, u, g) in grads() {
            let mut s = slice(1, p, u, g.clone());
            if (p, u) == (1, 1) {
                s.update = Update::zero();
                s.substitute = true;
            }
            r.offer(s);
            plain.offer(slice(1, p, u, g));
        }
        let a = r.try_reduce(1).expect("complete");
        let b = plain.try_reduce(1).expect("complete");
        assert_eq!(a.values, b.values, "same gradient as last time");
        assert_eq!(r.take_substituted(1), vec![1]);
        assert!(r.take_substituted(1).is_empty());
    }

    #[test]
    fn duplicates_are_counted_once() {
        let mut r = ShardReducer::new(0..2, 2, 2, 4, config(), vec![0.0; 2], vec![false, true]);
        for (p, u, g) in grads() {
            assert_eq!(r.offer(slice(0, p, u, g.clone())), Offer::Accepted);
            assert_eq!(r.offer(slice(0, p, u, g)), Offer::Duplicate);
        }
        let out = r.try_reduce(0).expect("complete");
        // (1e16 + 1) + (-1e16 + 1) in partition order: the 1 of partition 0 is lost
        // to rounding, the 1 of partition 1 survives.
        assert_eq!(out.loss_sum, 1e16 + 1.0 + (-1e16 + 1.0));
        assert_eq!(r.offer(slice(0, 0, 0, vec![5.0, 5.0])), Offer::Duplicate);
        assert_eq!(r.duplicates(), 5);
    }

    #[test]
    fn backup_workers_reduce_the_first_owners_to_deliver() {
        // partitions 0 and 1 owned by workers 0 and 1; keep one worker
        let rule = BackupRule {
            keep: 1,
            owners: vec![0, 1],
            units_per_owner: vec![2, 2],
        };
        let mut r0 = ShardReducer::new(0..2, 2, 2, 4, config(), vec![0.0; 2], vec![false, true])
            .with_backup(rule.clone());
        let mut r1 = ShardReducer::new(0..2, 2, 2, 4, config(), vec![0.0; 2], vec![false, true])
            .with_backup(rule);
        // worker 1 delivers first
        for (p, u, g) in grads().into_iter().filter(|(p, _, _)| *p == 1) {
            r0.offer(slice(0, p, u, g.clone()));
            r1.offer(slice(0, p, u, g));
        }
        assert!(!r0.is_complete(0), "no decision yet");
        let dropped = r0.decide(0).expect("worker 1 is complete");
        assert_eq!(dropped, vec![0]);
        assert_eq!(r0.decide(0), None, "decided once");
        assert!(!r1.is_complete(0), "shard 1 waits for shard 0's decision");
        r1.set_dropped(0, &dropped);
        let a = r0.try_reduce(0).expect("complete");
        let b = r1.try_reduce(0).expect("complete");
        assert_eq!(a.rows, 2.0);
        assert_eq!(a.values, b.values);
        // partition 1 only: -1e16 + 1
        assert_eq!(a.loss_sum, -1e16 + 1.0);
        // a late slice of the dropped worker is discarded
        assert_eq!(r0.offer(slice(0, 0, 0, vec![1.0, 1.0])), Offer::Duplicate);
    }

    #[test]
    fn incomplete_iteration_is_not_reduced() {
        let mut r = ShardReducer::new(0..2, 2, 2, 4, config(), vec![0.0; 2], vec![false, true]);
        for (p, u, g) in grads().into_iter().take(3) {
            r.offer(slice(0, p, u, g));
        }
        assert!(r.try_reduce(0).is_none());
    }
}
