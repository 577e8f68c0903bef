//! Where a pipeline run's layers were, iteration by iteration: the trace's
//! `placements.json`, written beside `ops.parquet` by worker 0's sink when
//! `rebalance-stages` moved work, so that `whatif --cut` measures each
//! iteration's speeds against the cut that iteration ran. Each entry holds
//! every replica's layer bounds from its iteration on; before the first,
//! the job's own cut. A resumed run goes on from its checkpoint's
//! placement, which it lists again at its first iteration.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::OpsError;

/// The file's name in a trace directory.
pub const PLACEMENTS_FILE: &str = "placements.json";

/// Every replica's layer bounds from `iteration` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementEntry {
    /// The first iteration it held.
    pub iteration: u64,
    /// Each replica's layer bounds (S + 1 each, from 0 to the layer count).
    pub cuts: Vec<Vec<usize>>,
}

/// The placements of `dir`'s run (none: the job's cut throughout).
pub fn read_placements(dir: &Path) -> Result<Vec<PlacementEntry>, OpsError> {
    let path = dir.join(PLACEMENTS_FILE);
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let io = |what, e: Box<dyn std::error::Error + Send + Sync>| OpsError::Io {
        path: path.clone(),
        what,
        source: e,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| io("reading", Box::new(e)))?;
    serde_json::from_str(&text).map_err(|e| io("parsing the placements", Box::new(e)))
}

/// Writes `moves` (this run's, from iteration `first`) to
/// `dir/placements.json` after the entries before `first` of the file
/// already there (a resumed run's, which then starts again at `job_cut`);
/// nothing when no placement ever moved. Through a temporary file.
pub fn write_placements(
    dir: &Path,
    moves: &[PlacementEntry],
    first: u64,
    job_cut: &[Vec<usize>],
) -> Result<(), OpsError> {
    let path = dir.join(PLACEMENTS_FILE);
    let mut entries: Vec<PlacementEntry> = match first > 0 {
        true => read_placements(dir)?
            .into_iter()
            .filter(|e| e.iteration < first)
            .collect(),
        false => Vec::new(),
    };
    if !entries.is_empty() {
        entries.push(PlacementEntry {
            iteration: first,
            cuts: job_cut.to_vec(),
        });
    }
    entries.extend(moves.iter().cloned());
    if entries.is_empty() {
        return Ok(());
    }
    let io = |what, e: Box<dyn std::error::Error + Send + Sync>| OpsError::Io {
        path: path.clone(),
        what,
        source: e,
    };
    let text = serde_json::to_string_pretty(&entries).map_err(|e| io("encoding", Box::new(e)))?;
    let tmp = dir.join(format!(".{PLACEMENTS_FILE}.tmp"));
    std::fs::write(&tmp, text).map_err(|e| io("writing", Box::new(e)))?;
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming into place", Box::new(e)))
}

/// The cuts in force at `step`: the last entry at or before it, else
/// `job_cut`.
pub fn cuts_at<'a>(
    entries: &'a [PlacementEntry],
    step: u64,
    job_cut: &'a [Vec<usize>],
) -> &'a [Vec<usize>] {
    entries
        .iter()
        .rev()
        .find(|e| e.iteration <= step)
        .map_or(job_cut, |e| &e.cuts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(iteration: u64, first: usize) -> PlacementEntry {
        PlacementEntry {
            iteration,
            cuts: vec![vec![0, first, 5], vec![0, 2, 5]],
        }
    }

    #[test]
    fn a_run_that_never_moved_writes_nothing_and_reads_as_its_cut() {
        let dir = tempfile::tempdir().expect("dir");
        let job = vec![vec![0, 2, 5]; 2];
        write_placements(dir.path(), &[], 0, &job).expect("writes");
        assert!(!dir.path().join(PLACEMENTS_FILE).exists());
        let read = read_placements(dir.path()).expect("reads");
        assert!(read.is_empty());
        assert_eq!(cuts_at(&read, 7, &job), &job[..]);
    }

    #[test]
    fn moves_are_kept_and_a_resumed_run_starts_again_at_the_jobs_cut() {
        let dir = tempfile::tempdir().expect("dir");
        let job = vec![vec![0, 2, 5]; 2];
        write_placements(dir.path(), &[entry(2, 3), entry(6, 1)], 0, &job).expect("writes");
        let read = read_placements(dir.path()).expect("reads");
        assert_eq!(cuts_at(&read, 1, &job), &job[..]);
        assert_eq!(cuts_at(&read, 4, &job)[0], [0, 3, 5]);
        assert_eq!(cuts_at(&read, 9, &job)[0], [0, 1, 5]);
        // resumed at 4: the entry at 2 stays, 4 is the job's cut, then 7
        write_placements(dir.path(), &[entry(7, 4)], 4, &job).expect("writes");
        let read = read_placements(dir.path()).expect("reads");
        let at: Vec<(u64, usize)> = read.iter().map(|e| (e.iteration, e.cuts[0][1])).collect();
        assert_eq!(at, [(2, 3), (4, 2), (7, 4)]);
    }

    #[test]
    fn a_corrupt_file_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join(PLACEMENTS_FILE), "{not json").expect("writes");
        let e = read_placements(dir.path()).expect_err("corrupt");
        assert!(e.to_string().contains(PLACEMENTS_FILE), "{e}");
    }
}
