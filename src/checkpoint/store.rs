//! Where checkpoints live in an output directory, how they are written, found,
//! checked and pruned.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::format::{decode, encode, FormatError};
use crate::fsutil::{write_atomic_within, Quota};

/// The checkpoints' directory inside an output directory.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// How many complete checkpoints are kept.
pub const KEPT: usize = 2;

/// A checkpoint that cannot be used, or a write that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file of the checkpoint could not be read or written.
    #[error("checkpoint file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file is corrupt or truncated.
    #[error("checkpoint file {path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: FormatError,
    },
    /// The checkpoint is incomplete or belongs to another job.
    #[error("checkpoint {dir}: {problem}")]
    Unusable {
        /// The checkpoint's directory.
        dir: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// One parameter shard's state after `iteration` steps.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardState {
    /// Parameter version (iterations reduced).
    pub iteration: u64,
    /// Shard index (= its owner worker).
    pub shard: u32,
    /// First coordinate of the shard.
    pub start: usize,
    /// The shard's values.
    pub values: Vec<f64>,
    /// Adam's first moments.
    pub m: Vec<f64>,
    /// Adam's second moments.
    pub v: Vec<f64>,
    /// Adam's step count.
    pub steps: i32,
}

#[derive(Debug, Serialize, Deserialize)]
struct ShardHeader {
    iteration: u64,
    shard: u32,
    start: usize,
    len: usize,
    steps: i32,
    plan_hash: String,
}

/// A process's trace cut at a checkpoint (process 0's also carries the job's
/// shared state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutHeader {
    /// Parameter version of the checkpoint.
    pub iteration: u64,
    /// The process.
    pub process: u32,
    /// Processes in the job.
    pub processes: u32,
    /// Workers in the job.
    pub workers: u32,
    /// Parameter shards in the job (`None`, from before shards could be
    /// fewer than workers: one per worker).
    #[serde(default)]
    pub shards: Option<u32>,
    /// The job's plan hash.
    pub plan_hash: String,
    /// Job clock (µs) when worker 0 began iteration `iteration`.
    pub job_us: u64,
    /// The holders of the process's workers' partitions, `(partition,
    /// holder)`.
    #[serde(default)]
    pub placement: Vec<(u32, u32)>,
    /// A pipeline's placement of layers and units at the checkpoint, when
    /// `rebalance-stages` moved it (process 0's cut; None: the job's own).
    #[serde(default)]
    pub stages: Option<crate::pipeline::Placement>,
}

impl CutHeader {
    /// The shard files of the checkpoint.
    fn shard_count(&self) -> u32 {
        self.shards.unwrap_or(self.workers)
    }
}

/// A complete checkpoint, loaded and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Parameter version: the run continues with iteration `iteration`.
    pub iteration: u64,
    /// Every coordinate's value.
    pub params: Vec<f64>,
    /// Every coordinate's Adam first moment.
    pub m: Vec<f64>,
    /// Every coordinate's Adam second moment.
    pub v: Vec<f64>,
    /// Adam's step count (the same in every shard).
    pub steps: i32,
    /// The online predictor's history (process 0's cut payload; empty when
    /// the job predicts nothing).
    pub history: Vec<f64>,
    /// Job clock (µs) at the checkpoint.
    pub job_us: u64,
    /// Every partition's holders at the checkpoint, `(partition, holder)` in
    /// order (empty if the writer recorded none).
    pub placement: Vec<(u32, u32)>,
    /// A pipeline's placement at the checkpoint when it was not the job's
    /// own (`rebalance-stages`).
    pub stages: Option<crate::pipeline::Placement>,
    /// Where it was read from.
    pub dir: PathBuf,
}

/// `OUT/checkpoints/it-{iteration:08}`.
pub fn iteration_dir(out: &Path, iteration: u64) -> PathBuf {
    out.join(CHECKPOINTS_DIR).join(format!("it-{iteration:08}"))
}

fn shard_file(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("shard-{shard:05}.ckpt"))
}

fn cut_file(dir: &Path, process: u32) -> PathBuf {
    dir.join(format!("cut-p{process:03}.ckpt"))
}

fn write(path: &Path, bytes: &[u8], quota: &Quota) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.is_dir()) {
        std::fs::create_dir_all(dir).map_err(io)?;
        // The new directory's own entry must be durable too.
        if let Some(parent) = dir.parent() {
            crate::fsutil::sync_dir(parent).map_err(io)?;
        }
    }
    write_atomic_within(path, bytes, quota).map_err(io)
}

/// Writes one shard's state into the checkpoint of `state.iteration`.
pub fn write_shard(
    out: &Path,
    state: &ShardState,
    plan_hash: &str,
    quota: &Quota,
) -> Result<PathBuf, CheckpointError> {
    let header = ShardHeader {
        iteration: state.iteration,
        shard: state.shard,
        start: state.start,
        len: state.values.len(),
        steps: state.steps,
        plan_hash: plan_hash.to_owned(),
    };
    let mut payload = Vec::with_capacity(state.values.len() * 3);
    payload.extend_from_slice(&state.values);
    payload.extend_from_slice(&state.m);
    payload.extend_from_slice(&state.v);
    let path = shard_file(&iteration_dir(out, state.iteration), state.shard);
    write(&path, &encode(&header, &payload), quota)?;
    Ok(path)
}

/// Writes a process's cut (with `history` as payload: process 0).
pub fn write_cut(
    out: &Path,
    cut: &CutHeader,
    history: &[f64],
    quota: &Quota,
) -> Result<PathBuf, CheckpointError> {
    let path = cut_file(&iteration_dir(out, cut.iteration), cut.process);
    write(&path, &encode(cut, history), quota)?;
    Ok(path)
}

fn read<H: serde::de::DeserializeOwned>(path: &Path) -> Result<(H, Vec<f64>), CheckpointError> {
    let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    })?;
    decode(&bytes).map_err(|source| CheckpointError::Format {
        path: path.to_owned(),
        source,
    })
}

/// Loads and checks the checkpoint in `dir` of a job with `plan_hash`,
/// `workers` workers and `dims` parameters (if known), whatever its shard
/// count.
pub fn load(
    dir: &Path,
    plan_hash: &str,
    workers: u32,
    dims: Option<usize>,
) -> Result<Checkpoint, CheckpointError> {
    let unusable = |problem: String| CheckpointError::Unusable {
        dir: dir.to_owned(),
        problem,
    };
    let (cut0, history): (CutHeader, Vec<f64>) = read(&cut_file(dir, 0))?;
    if cut0.plan_hash != plan_hash {
        return Err(unusable(format!(
            "written by another job (plan {}, this job's {}): resume with the job file and flags of the run it continues",
            short(&cut0.plan_hash),
            short(plan_hash)
        )));
    }
    if cut0.workers != workers {
        return Err(unusable(format!(
            "written by {} workers, this job has {workers}",
            cut0.workers
        )));
    }
    let mut placement = cut0.placement.clone();
    for p in 1..cut0.processes {
        let (cut, _): (CutHeader, Vec<f64>) = read(&cut_file(dir, p))?;
        if cut.iteration != cut0.iteration || cut.plan_hash != cut0.plan_hash {
            return Err(unusable(format!(
                "process {p}'s cut is of another checkpoint"
            )));
        }
        placement.extend(cut.placement);
    }
    placement.sort_unstable();
    placement.dedup();
    let (mut params, mut m, mut v) = (Vec::new(), Vec::new(), Vec::new());
    let mut steps = None;
    // Shards tile the coordinates (in order of their starts: a pipeline's
    // shard k is worker k's, and a stage's shards are its replicas'), so
    // any shard count loads into the same vectors.
    let mut shards = (0..cut0.shard_count())
        .map(|s| read::<ShardHeader>(&shard_file(dir, s)).map(|(h, p)| (s, h, p)))
        .collect::<Result<Vec<_>, _>>()?;
    shards.sort_by_key(|(_, h, _)| h.start);
    for (s, h, payload) in shards {
        if h.iteration != cut0.iteration
            || h.shard != s
            || h.start != params.len()
            || h.plan_hash != cut0.plan_hash
            || payload.len() != 3 * h.len
            || steps.is_some_and(|k| k != h.steps)
        {
            return Err(unusable(format!(
                "shard {s} does not fit the others (iteration {}, start {}, {} values)",
                h.iteration, h.start, h.len
            )));
        }
        steps = Some(h.steps);
        params.extend_from_slice(&payload[..h.len]);
        m.extend_from_slice(&payload[h.len..2 * h.len]);
        v.extend_from_slice(&payload[2 * h.len..]);
    }
    if let Some(dims) = dims.filter(|&d| d != params.len()) {
        return Err(unusable(format!(
            "holds {} parameters, the model has {dims}",
            params.len()
        )));
    }
    Ok(Checkpoint {
        iteration: cut0.iteration,
        params,
        m,
        v,
        steps: steps.unwrap_or(0),
        history,
        job_us: cut0.job_us,
        placement,
        stages: cut0.stages.clone(),
        dir: dir.to_owned(),
    })
}

fn short(hash: &str) -> &str {
    &hash[..12.min(hash.len())]
}

/// The checkpoint directories under `out`, newest first, with their iteration.
pub fn list(out: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(out.join(CHECKPOINTS_DIR)) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let it = name.strip_prefix("it-")?.parse().ok()?;
            Some((it, e.path()))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found
}

/// The newest checkpoint under `out` that loads and checks, telling `skipped`
/// why each newer one was passed over.
pub fn newest_valid(
    out: &Path,
    plan_hash: &str,
    workers: u32,
    dims: Option<usize>,
    skipped: &mut dyn FnMut(&CheckpointError),
) -> Option<Checkpoint> {
    for (_, dir) in list(out) {
        match load(&dir, plan_hash, workers, dims) {
            Ok(c) => return Some(c),
            Err(e) => skipped(&e),
        }
    }
    None
}

/// Whether `out` holds a checkpoint with every file present (not checked
/// against a plan: loading it does that).
pub fn has_complete(out: &Path) -> bool {
    list(out).iter().any(|(_, dir)| is_complete(dir))
}

/// Whether every file of the checkpoint in `dir` is present (not checked).
fn is_complete(dir: &Path) -> bool {
    let Ok((cut0, _)) = read::<CutHeader>(&cut_file(dir, 0)) else {
        return false;
    };
    (1..cut0.processes).all(|p| cut_file(dir, p).exists())
        && (0..cut0.shard_count()).all(|s| shard_file(dir, s).exists())
}

/// Removes every checkpoint older than the [`KEPT`] newest complete ones.
pub fn prune(out: &Path) -> Result<(), CheckpointError> {
    let mut complete = 0;
    for (_, dir) in list(out) {
        if complete >= KEPT {
            std::fs::remove_dir_all(&dir)
                .map_err(|source| CheckpointError::Io { path: dir, source })?;
        } else if is_complete(&dir) {
            complete += 1;
        }
    }
    Ok(())
}

/// Removes the checkpoints after `iteration` (a resumed run writes them anew).
pub fn remove_after(out: &Path, iteration: u64) -> Result<(), CheckpointError> {
    for (it, dir) in list(out) {
        if it > iteration {
            std::fs::remove_dir_all(&dir)
                .map_err(|source| CheckpointError::Io { path: dir, source })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(iteration: u64, shard: u32, start: usize, len: usize) -> ShardState {
        ShardState {
            iteration,
            shard,
            start,
            values: (0..len).map(|i| (start + i) as f64 * 0.5).collect(),
            m: vec![0.25; len],
            v: vec![0.125; len],
            steps: iteration as i32,
        }
    }

    fn cut(iteration: u64, process: u32) -> CutHeader {
        CutHeader {
            iteration,
            process,
            processes: 2,
            workers: 2,
            // As written before shards could be fewer than workers: one each.
            shards: None,
            plan_hash: "abc".into(),
            job_us: 1000 * iteration,
            placement: vec![(process, process), (process, 1 - process)],
            stages: None,
        }
    }

    fn write_checkpoint(out: &Path, iteration: u64) {
        let q = Quota::default();
        write_shard(out, &shard(iteration, 0, 0, 3), "abc", &q).unwrap();
        write_shard(out, &shard(iteration, 1, 3, 2), "abc", &q).unwrap();
        write_cut(out, &cut(iteration, 0), &[1.0, 2.0], &q).unwrap();
        write_cut(out, &cut(iteration, 1), &[], &q).unwrap();
    }

    #[test]
    fn a_complete_checkpoint_loads_whole() {
        let tmp = tempfile::tempdir().unwrap();
        write_checkpoint(tmp.path(), 10);
        let c = load(&iteration_dir(tmp.path(), 10), "abc", 2, Some(5)).unwrap();
        assert_eq!(c.iteration, 10);
        assert_eq!(c.params, vec![0.0, 0.5, 1.0, 1.5, 2.0]);
        assert_eq!(c.m, vec![0.25; 5]);
        assert_eq!(c.steps, 10);
        assert_eq!(c.history, vec![1.0, 2.0]);
        assert_eq!(c.job_us, 10_000);
        assert_eq!(c.placement, vec![(0, 0), (0, 1), (1, 0), (1, 1)]);
    }

    #[test]
    fn a_checkpoint_with_fewer_shards_than_workers_loads_whole() {
        // Two workers, one shard (a small model): one shard file, and the
        // cut says so; a missing second shard file is not missed.
        let tmp = tempfile::tempdir().unwrap();
        let q = Quota::default();
        write_shard(tmp.path(), &shard(10, 0, 0, 5), "abc", &q).unwrap();
        for p in 0..2 {
            let one = CutHeader {
                shards: Some(1),
                ..cut(10, p)
            };
            write_cut(tmp.path(), &one, &[], &q).unwrap();
        }
        let dir = iteration_dir(tmp.path(), 10);
        assert!(is_complete(&dir));
        let c = load(&dir, "abc", 2, Some(5)).unwrap();
        assert_eq!(c.params, vec![0.0, 0.5, 1.0, 1.5, 2.0]);
        // A shard that does not cover the model is still refused.
        let err = load(&dir, "abc", 2, Some(6)).unwrap_err().to_string();
        assert!(err.contains("holds 5 parameters, the model has 6"), "{err}");
    }

    #[test]
    fn shards_numbered_out_of_coordinate_order_load_by_their_starts() {
        // A pipeline of 2 stages × 2 replicas: shards 0 and 2 hold the first
        // stage's coordinates, 1 and 3 the second's.
        let tmp = tempfile::tempdir().unwrap();
        let q = Quota::default();
        for (k, start) in [(0, 0), (2, 2), (1, 4), (3, 6)] {
            write_shard(tmp.path(), &shard(10, k, start, 2), "abc", &q).unwrap();
        }
        for p in 0..2 {
            let four = CutHeader {
                shards: Some(4),
                stages: None,
                ..cut(10, p)
            };
            write_cut(tmp.path(), &four, &[], &q).unwrap();
        }
        let c = load(&iteration_dir(tmp.path(), 10), "abc", 2, Some(8)).unwrap();
        let expected: Vec<f64> = (0..8).map(|i| f64::from(i) * 0.5).collect();
        assert_eq!(c.params, expected);
        // a gap between them is still refused
        write_shard(tmp.path(), &shard(10, 3, 7, 2), "abc", &q).unwrap();
        let err = load(&iteration_dir(tmp.path(), 10), "abc", 2, None).unwrap_err();
        assert!(err.to_string().contains("shard 3 does not fit"), "{err}");
    }

    #[test]
    fn a_corrupt_newest_checkpoint_falls_back_to_the_previous_one() {
        let tmp = tempfile::tempdir().unwrap();
        write_checkpoint(tmp.path(), 10);
        write_checkpoint(tmp.path(), 20);
        let bad = shard_file(&iteration_dir(tmp.path(), 20), 1);
        let mut bytes = std::fs::read(&bad).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&bad, bytes).unwrap();
        let mut why = Vec::new();
        let c = newest_valid(tmp.path(), "abc", 2, Some(5), &mut |e| {
            why.push(e.to_string())
        })
        .expect("the older one");
        assert_eq!(c.iteration, 10);
        assert_eq!(why.len(), 1);
        assert!(
            why[0].contains("shard-00001.ckpt") && why[0].contains("checksum"),
            "{why:?}"
        );
        // truncated, then missing
        let bytes = std::fs::read(shard_file(&iteration_dir(tmp.path(), 10), 0)).unwrap();
        std::fs::write(
            shard_file(&iteration_dir(tmp.path(), 10), 0),
            &bytes[..bytes.len() - 9],
        )
        .unwrap();
        assert!(newest_valid(tmp.path(), "abc", 2, Some(5), &mut |_| {}).is_none());
    }

    #[test]
    fn another_jobs_or_an_incomplete_checkpoint_is_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        write_checkpoint(tmp.path(), 10);
        let dir = iteration_dir(tmp.path(), 10);
        let err = load(&dir, "other", 2, Some(5)).unwrap_err().to_string();
        assert!(err.contains("another job"), "{err}");
        let err = load(&dir, "abc", 3, Some(5)).unwrap_err().to_string();
        assert!(err.contains("2 workers"), "{err}");
        std::fs::remove_file(cut_file(&dir, 1)).unwrap();
        let err = load(&dir, "abc", 2, Some(5)).unwrap_err().to_string();
        assert!(err.contains("cut-p001.ckpt"), "{err}");
    }

    #[test]
    fn prune_keeps_the_two_newest_complete_and_anything_newer() {
        let tmp = tempfile::tempdir().unwrap();
        for it in [10, 20, 30, 40] {
            write_checkpoint(tmp.path(), it);
        }
        // 50: only one shard written when the job died
        write_shard(tmp.path(), &shard(50, 0, 0, 3), "abc", &Quota::default()).unwrap();
        prune(tmp.path()).unwrap();
        let left: Vec<u64> = list(tmp.path()).into_iter().map(|(i, _)| i).collect();
        assert_eq!(left, vec![50, 40, 30]);
        remove_after(tmp.path(), 30).unwrap();
        let left: Vec<u64> = list(tmp.path()).into_iter().map(|(i, _)| i).collect();
        assert_eq!(left, vec![30]);
    }

    #[test]
    fn a_full_disk_fails_the_write_and_leaves_the_earlier_checkpoint_intact() {
        let tmp = tempfile::tempdir().unwrap();
        write_checkpoint(tmp.path(), 10);
        let err = write_shard(tmp.path(), &shard(20, 0, 0, 3), "abc", &Quota::bytes(64))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shard-00000.ckpt") && err.contains("No space left"),
            "{err}"
        );
        let dir20 = iteration_dir(tmp.path(), 20);
        assert_eq!(std::fs::read_dir(&dir20).unwrap().count(), 0);
        assert!(load(&iteration_dir(tmp.path(), 10), "abc", 2, Some(5)).is_ok());
    }
}
