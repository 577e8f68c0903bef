//! A shard's gradient of a unit sent in parts (a pipeline whose layers
//! moved between stages: each stage worker sends the coordinates its layers
//! hold, [`GradSlice::span`]), put together at the shard's owner before the
//! reduction. Putting together copies values and adds the parts' loss sums
//! (only the first stage's is not 0): the whole slice has the bits a single
//! sender's would.

use std::collections::BTreeMap;

use super::messages::GradSlice;
use crate::workload::Update;

/// A unit's parts so far.
struct Partial {
    values: Vec<f64>,
    covered: usize,
    first: GradSlice,
    loss_sum: f64,
}

/// The parts of the units of one shard of `len` coordinates.
pub struct Parts {
    len: usize,
    partial: BTreeMap<(u64, u32, u32), Partial>,
}

impl Parts {
    /// No parts yet, for a shard of `len` coordinates.
    pub fn new(len: usize) -> Self {
        Self {
            len,
            partial: BTreeMap::new(),
        }
    }

    /// `slice` itself if whole; else it is filed, and the whole slice once
    /// its unit's parts cover the shard. A part that reaches past the shard,
    /// or covers coordinates already covered, is dropped with a warning (no
    /// sender of this job sends one).
    pub fn add(&mut self, slice: GradSlice) -> Option<GradSlice> {
        let Some((offset, count)) = slice.span else {
            return Some(slice);
        };
        let (offset, count) = (offset as usize, count as usize);
        if offset + count > self.len {
            tracing::warn!(
                offset,
                count,
                len = self.len,
                "a gradient part past its shard"
            );
            return None;
        }
        let key = (slice.iteration, slice.partition, slice.unit);
        let len = self.len;
        let entry = self.partial.entry(key).or_insert_with(|| Partial {
            values: vec![0.0; len],
            covered: 0,
            loss_sum: 0.0,
            first: GradSlice {
                update: Update::zero(),
                ..slice.clone()
            },
        });
        let dense = slice.update.to_dense(count);
        entry.values[offset..offset + count].copy_from_slice(&dense[..count]);
        entry.covered += count;
        entry.loss_sum += slice.loss_sum;
        if entry.covered < len {
            return None;
        }
        let done = self.partial.remove(&key).expect("present");
        if done.covered > len {
            tracing::warn!(
                covered = done.covered,
                len,
                "gradient parts overlap; the unit is dropped"
            );
            return None;
        }
        Some(GradSlice {
            update: Update::Dense(done.values),
            loss_sum: done.loss_sum,
            span: None,
            piece: None,
            ..done.first
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(span: Option<(u32, u32)>, values: Vec<f64>, loss_sum: f64) -> GradSlice {
        GradSlice {
            owner: 0,
            iteration: 3,
            partition: 1,
            unit: 0,
            executor: 0,
            rows: 8,
            loss_sum,
            update: Update::Dense(values),
            substitute: false,
            stop_at: None,
            sent_us: 0,
            span,
            piece: None,
        }
    }

    #[test]
    fn parts_make_the_whole_slice_in_any_order() {
        let whole = part(None, vec![1.5, -0.0, 2.25, 7.0], 0.75);
        let mut parts = Parts::new(4);
        assert_eq!(parts.add(whole.clone()), Some(whole.clone()));
        let a = part(Some((2, 2)), vec![2.25, 7.0], 0.0);
        let b = part(Some((0, 2)), vec![1.5, -0.0], 0.75);
        assert_eq!(parts.add(a), None);
        let got = parts.add(b).expect("complete");
        let bits = |s: &GradSlice| match &s.update {
            Update::Dense(v) => v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            Update::Sparse { .. } => Vec::new(),
        };
        assert_eq!(bits(&got), bits(&whole));
        assert_eq!(got.loss_sum.to_bits(), whole.loss_sum.to_bits());
        assert_eq!((got.rows, got.span), (8, None));
    }

    #[test]
    fn a_part_past_the_shard_is_dropped() {
        let mut parts = Parts::new(4);
        assert_eq!(parts.add(part(Some((3, 2)), vec![1.0, 2.0], 0.0)), None);
    }
}
