//! Sample records for the trace tests, with every field distinct.

use super::part::TraceStamp;
use super::record::{IterationRecord, UnitAction, UnitRecord, WorkerRecord};

pub(crate) fn stamp(job_id: &str) -> TraceStamp {
    TraceStamp {
        job_id: job_id.to_string(),
        git_revision: "0123abcd".to_string(),
        plan_hash: "plan-hash".to_string(),
        seed: u64::MAX,
    }
}

pub(crate) fn unit(iteration: u64, worker: u32, partition: u32, unit: u32) -> UnitRecord {
    let base = iteration * 1_000_000 + u64::from(worker) * 10_000 + u64::from(unit) * 100;
    UnitRecord {
        iteration,
        worker,
        process: worker / 2,
        partition,
        unit,
        owner: worker + 1,
        executor: worker,
        start_us: base + 1,
        end_us: base + 90,
        compute_us: 70 + u64::from(unit),
        wait_us: 3 + u64::from(partition),
        rows: 64 + unit,
        bytes_sent: 4096 + u64::from(partition),
        action: UnitAction::Assigned,
        gt_slowdown: 1.0 + f64::from(worker) * 0.25,
        gt_delay_us: u64::from(worker) * 11,
        micro_batches: 1 + unit % 3,
        send_us: u64::from(unit) * 7,
        gt_link_mbps: if unit % 2 == 1 { 25.0 } else { 0.0 },
    }
}

pub(crate) fn worker(iteration: u64, worker: u32) -> WorkerRecord {
    let base = iteration * 1_000_000 + u64::from(worker) * 10;
    WorkerRecord {
        iteration,
        worker,
        process: worker / 2,
        units: 4 + worker,
        rows: 256 + u64::from(worker),
        ready_us: base + 5,
        finish_us: base + 500,
        compute_us: 400 + u64::from(worker),
        busy_us: 495,
        barrier_wait_us: 7 + u64::from(worker),
        operator_us: 450 + iteration,
        bytes_sent: 1 << 20,
        bytes_moved: 4096 * u64::from(worker),
        units_given: worker,
        control_sent: 2 * worker,
        control_bytes: 40 * u64::from(worker),
        units_cancelled: worker / 2,
        wasted_us: 30 * u64::from(worker),
        transit_us: 0,
        params_transit_us: 0,
        params_version: iteration,
        predicted_unit_us: worker
            .is_multiple_of(2)
            .then_some(120.5 + f64::from(worker)),
        gt_slowdown: 1.5 + f64::from(worker),
        gt_delay_us: 40 * u64::from(worker),
    }
}

/// An iteration of a `cnn` run; `laggard` also decides whether the test
/// metrics (loss, accuracy and the workload's own) are set.
pub(crate) fn iteration(iteration: u64, laggard: Option<u32>) -> IterationRecord {
    let evaluated = laggard.is_some();
    IterationRecord {
        iteration,
        start_us: iteration * 1000 + 1,
        end_us: iteration * 1000 + 900,
        wall_us: 899,
        train_loss: 0.693 / (iteration as f64 + 1.0),
        test_loss: evaluated.then_some(0.5 + iteration as f64),
        test_accuracy: evaluated.then_some(0.75),
        laggard,
        lag_us: 120 + iteration,
        median_busy_us: 700,
        barrier_wait_us: 333,
        units: 16,
        rows: 1024 + iteration,
        dropped_partitions: if evaluated {
            String::new()
        } else {
            "3,7".into()
        },
        workload: "cnn".into(),
        test_metrics: if evaluated {
            [
                ("auc".to_string(), 0.875 + iteration as f64 / 64.0),
                ("third".to_string(), 1.0 / 3.0),
            ]
            .into()
        } else {
            Default::default()
        },
    }
}

pub(crate) fn one_of_each() -> (UnitRecord, WorkerRecord, IterationRecord) {
    (unit(1, 2, 3, 4), worker(1, 2), iteration(1, Some(2)))
}
