//! Data placement: which worker owns each partition, and the differential
//! collection of who holds which partition's rows (each worker's own inputs
//! to it are [`super::context::owned_inputs`]).

use differential_dataflow::input::Input;
use differential_dataflow::AsCollection;
use timely::dataflow::{Scope, Stream};

use super::holdings::{Delivery, PlacementUpdate, RowUpdate};

/// The placement collection, built on every worker.
///
/// `placement` holds `(partition, holder)` pairs: `initial` (owner and
/// replicas, at time 0) plus `requests`, the holders the compute operators add
/// while the job runs (at the iteration after the one that asked).
/// `placement.join(rows)` turns each change into its partition's rows: a
/// holder added at time `t` receives exactly that partition's rows as `+1`
/// diffs at `t`, a holder removed receives them as `-1`, and nobody else hears
/// of it.
///
/// Returns the row deliveries (to be routed to the holder) and the placement
/// updates (to be routed to the owner).
pub fn placement_flow<'s>(
    scope: Scope<'s, u64>,
    rows: Vec<RowUpdate>,
    initial: Vec<PlacementUpdate>,
    requests: Stream<'s, u64, Vec<PlacementUpdate>>,
) -> (
    Stream<'s, u64, Vec<Delivery>>,
    Stream<'s, u64, Vec<PlacementUpdate>>,
) {
    // The handles drop here: rows and the initial placement are fixed.
    let (_, rows) = scope.new_collection_from_raw(rows);
    let (_, initial) = scope.new_collection_from_raw(initial);
    let placement = initial.concat(requests.as_collection());
    let deliveries = placement.clone().join(rows);
    (deliveries.inner, placement.inner)
}

/// Owner of each partition. With no weights partitions go round-robin; with
/// weights (a skewed data share) each worker gets a quota of partitions in
/// proportion to its weight, at least one each, by largest remainder, and
/// partitions are dealt round-robin among workers that still have quota.
///
/// The caller has checked `workers >= 1` and `partitions >= workers`.
pub fn place_partitions(partitions: u32, workers: u32, weights: Option<&[f64]>) -> Vec<u32> {
    let Some(weights) = weights else {
        return (0..partitions).map(|p| p % workers).collect();
    };
    let quotas = quotas(partitions, weights);
    let mut left = quotas.clone();
    let mut owners = Vec::with_capacity(partitions as usize);
    let mut w = 0usize;
    while owners.len() < partitions as usize {
        if left[w] > 0 {
            left[w] -= 1;
            owners.push(w as u32);
        }
        w = (w + 1) % weights.len();
    }
    owners
}

/// Partitions per worker in proportion to `weights` (largest remainder, ties to
/// the lower index), then at least one each, taken from the largest quota.
fn quotas(partitions: u32, weights: &[f64]) -> Vec<u32> {
    let total: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights
        .iter()
        .map(|w| w / total * partitions as f64)
        .collect();
    let mut q: Vec<u32> = exact.iter().map(|e| e.floor() as u32).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        let ra = exact[a] - exact[a].floor();
        let rb = exact[b] - exact[b].floor();
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    let given: u32 = q.iter().sum();
    for &i in order.iter().cycle().take((partitions - given) as usize) {
        q[i] += 1;
    }
    while let Some(empty) = q.iter().position(|&x| x == 0) {
        let (largest, _) = q
            .iter()
            .enumerate()
            .max_by_key(|&(i, &x)| (x, std::cmp::Reverse(i)))
            .expect("at least one worker");
        q[largest] -= 1;
        q[empty] += 1;
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{DataRow, RowBlock};

    #[test]
    fn round_robin_without_weights() {
        assert_eq!(place_partitions(5, 2, None), vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn flexrr_skew_gives_half_the_workers_three_quarters() {
        let weights = [0.1875, 0.1875, 0.0625, 0.0625];
        let owners = place_partitions(48, 4, Some(&weights));
        let heavy = owners.iter().filter(|&&w| w < 2).count();
        assert_eq!(heavy, 36);
        for w in 0..4 {
            assert!(owners.contains(&w));
        }
    }

    #[test]
    fn quotas_sum_to_partitions() {
        for p in 3..40 {
            let q = quotas(p, &[0.5, 0.3, 0.2]);
            assert_eq!(q.iter().sum::<u32>(), p);
            assert!(q.iter().all(|&x| x >= 1));
        }
    }

    /// Two workers, partitions 0 (rows 10, 11) and 1 (row 20), owned by workers
    /// 0 and 1. At time 1 worker 1 also takes partition 0; at time 2 worker 0
    /// lets it go. Exactly partition 0's rows travel: +1 to worker 1 at time 1,
    /// -1 to worker 0 at time 2, nothing else after the initial load.
    #[test]
    fn moving_a_partition_delivers_exactly_its_rows_as_diffs() {
        use std::sync::{Arc, Mutex};
        use timely::dataflow::operators::{Exchange, Input, Inspect, Probe};

        let row = |r: u32| RowBlock {
            rows: vec![DataRow {
                row: r,
                label_bits: 0,
                indices: vec![0],
                value_bits: vec![f64::from(r).to_bits()],
            }],
        };
        type Seen = (usize, u32, u32, u32, u64, isize);
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let sink = Arc::clone(&seen);
        timely::execute(timely::Config::process(2), move |worker| {
            let index = worker.index();
            let sink = Arc::clone(&sink);
            let (mut requests, probe) = worker.dataflow::<u64, _, _>(|scope| {
                let (handle, requests) = scope.new_input::<Vec<PlacementUpdate>>();
                let (rows, initial) = if index == 0 {
                    (
                        vec![((0, row(10)), 0, 1), ((0, row(11)), 0, 1)],
                        vec![((0, 0), 0, 1)],
                    )
                } else {
                    (vec![((1, row(20)), 0, 1)], vec![((1, 1), 0, 1)])
                };
                let (deliveries, _) = placement_flow(scope, rows, initial, requests);
                let probe = deliveries
                    .exchange(|d: &Delivery| u64::from((d.0).1 .0))
                    .inspect(move |((p, (h, r)), t, d)| {
                        sink.lock()
                            .unwrap()
                            .push((index, *p, *h, r.rows[0].row, *t, *d));
                    })
                    .probe()
                    .0;
                (handle, probe)
            });
            if index == 1 {
                requests.send(((0, 1), 1, 1));
                requests.advance_to(2);
                requests.send(((0, 0), 2, -1));
            }
            requests.advance_to(3);
            drop(requests);
            while !probe.done() {
                worker.step();
            }
        })
        .expect("timely runs")
        .join()
        .into_iter()
        .for_each(|r| r.expect("worker succeeds"));

        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(
            seen,
            vec![
                (0, 0, 0, 10, 0, 1),
                (0, 0, 0, 10, 2, -1),
                (0, 0, 0, 11, 0, 1),
                (0, 0, 0, 11, 2, -1),
                (1, 0, 1, 10, 1, 1),
                (1, 0, 1, 11, 1, 1),
                (1, 1, 1, 20, 0, 1),
            ],
            "(receiver, partition, holder, row, time, diff)"
        );
    }
}
