//! A pipeline run's operation trace: every stage worker's passes, sends and
//! receives, written by worker 0's sink as `ops.parquet` in the trace
//! directory, in the schema the ByteDance importer writes, so that
//! `forestall analyze` replays it. Each iteration is a step whose times
//! count from its first operation; a resumed run keeps the earlier steps.

use std::path::Path;

use crate::ops::{read_ops, write_ops, OpRecord, OpsError};
use crate::run::messages::StageOp;

/// The operation file's name in a trace directory.
pub const OPS_FILE: &str = "ops.parquet";

/// `ops` as the trace's rows: each iteration's times from its first
/// operation, in seconds.
pub fn op_records(ops: &[StageOp]) -> Vec<OpRecord> {
    let mut origin = std::collections::BTreeMap::<u64, u64>::new();
    for o in ops {
        let at = origin.entry(o.iteration).or_insert(o.start_us);
        *at = (*at).min(o.start_us);
    }
    let mut records: Vec<OpRecord> = ops
        .iter()
        .map(|o| OpRecord {
            step: o.iteration as i64,
            dp_rank: o.replica,
            stage: o.stage,
            rank: o.worker,
            kind: o.kind,
            seq_id: o.seq_id,
            mc: 0,
            mb_id: o.micro as i32,
            gmc: o.stage as i32,
            start_s: (o.start_us - origin[&o.iteration]) as f64 / 1e6,
            duration_s: o.duration_us as f64 / 1e6,
        })
        .collect();
    records.sort_by(|a, b| {
        (a.step, a.rank, a.kind, a.seq_id).cmp(&(b.step, b.rank, b.kind, b.seq_id))
    });
    records
}

/// Writes `ops` to `dir/ops.parquet`, after the steps before `first` of
/// the file already there (a resumed run's); through a temporary file, so
/// a failed write leaves the old file whole.
pub fn write_stage_ops(dir: &Path, ops: &[StageOp], first: u64) -> Result<(), OpsError> {
    let path = dir.join(OPS_FILE);
    let mut records = match (first > 0, path.is_file()) {
        (true, true) => read_ops(&path)?
            .into_iter()
            .filter(|r| r.step < first as i64)
            .collect(),
        _ => Vec::new(),
    };
    records.extend(op_records(ops));
    let tmp = dir.join(format!(".{OPS_FILE}.tmp"));
    write_ops(&tmp, &records)?;
    std::fs::rename(&tmp, &path).map_err(|e| OpsError::Io {
        path: path.clone(),
        what: "renaming the written operations into place",
        source: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::OpKind;

    fn op(iteration: u64, worker: u32, kind: OpKind, start_us: u64) -> StageOp {
        StageOp {
            iteration,
            replica: 0,
            stage: worker,
            worker,
            kind,
            seq_id: 0,
            micro: 0,
            start_us,
            duration_us: 500,
        }
    }

    #[test]
    fn each_step_counts_from_its_first_operation() {
        let ops = [
            op(1, 1, OpKind::ForwardCompute, 9_000),
            op(0, 0, OpKind::ForwardCompute, 1_000),
            op(1, 0, OpKind::ForwardCompute, 8_000),
        ];
        let r = op_records(&ops);
        let starts: Vec<(i64, u32, f64)> = r.iter().map(|r| (r.step, r.rank, r.start_s)).collect();
        assert_eq!(starts, [(0, 0, 0.0), (1, 0, 0.0), (1, 1, 0.001)]);
        assert!(r.iter().all(|r| r.duration_s == 0.0005 && r.mc == 0));
    }

    #[test]
    fn a_resumed_run_keeps_the_earlier_steps() {
        let dir = tempfile::tempdir().expect("dir");
        write_stage_ops(
            dir.path(),
            &[
                op(0, 0, OpKind::ForwardCompute, 0),
                op(1, 0, OpKind::ForwardCompute, 10),
            ],
            0,
        )
        .expect("writes");
        // resumed at 1: step 1 is written anew, step 0 kept
        write_stage_ops(
            dir.path(),
            &[
                op(1, 0, OpKind::BackwardCompute, 20),
                op(2, 0, OpKind::ForwardCompute, 30),
            ],
            1,
        )
        .expect("writes");
        let back = read_ops(&dir.path().join(OPS_FILE)).expect("reads");
        let steps: Vec<(i64, OpKind)> = back.iter().map(|r| (r.step, r.kind)).collect();
        assert_eq!(
            steps,
            [
                (0, OpKind::ForwardCompute),
                (1, OpKind::BackwardCompute),
                (2, OpKind::ForwardCompute)
            ]
        );
    }
}
