//! A trace directory read into what the analysis needs, one part file at a
//! time: per (iteration, worker) its busy time, rows and barrier wait; per
//! worker its units' durations; per iteration its wall time and laggard.

use std::collections::BTreeMap;
use std::path::Path;

use crate::trace::{
    for_each_part, read_iterations_file, read_units_file, read_workers_file, TraceError,
    TraceStamp, TraceTable,
};

/// Marks a worker with no row in an iteration.
pub const MISSING: u64 = u64::MAX;

/// What the analysis reads of a trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The trace's stamp (job id, git revision, plan hash, seed).
    pub stamp: Option<TraceStamp>,
    /// Workers (0..workers).
    pub workers: usize,
    /// Iteration numbers, ascending.
    pub iterations: Vec<u64>,
    /// `busy[i][w]`: worker w's part of iteration i, µs ([`MISSING`]: no
    /// row): from its parameters' arrival until its last gradient reached
    /// shard 0's owner and its own shard's next version reached every host
    /// (its busy time plus `transit`).
    pub busy: Vec<Vec<u64>>,
    /// `rows[i][w]`: rows worker w processed in iteration i.
    pub rows: Vec<Vec<u32>>,
    /// `barrier[i][w]`: worker w's wait at the barrier, µs.
    pub barrier: Vec<Vec<u64>>,
    /// `send[i][w]`: the time worker w's gradients took through its link
    /// in iteration i, µs (the units' `send_us`; 0 without a units table).
    pub send: Vec<Vec<u64>>,
    /// `transit[i][w]`: the time worker w's messages of iteration i spent
    /// between hosts, µs: the longest a gradient of it took to reach shard
    /// 0's owner, plus the longest its shard's next version took to reach a
    /// worker on another host (the workers' `transit_us` and
    /// `params_transit_us`).
    pub transit: Vec<Vec<u64>>,
    /// Iteration wall time, µs (from the iterations table; the longest busy
    /// time when the table is absent).
    pub wall: Vec<u64>,
    /// Laggard of each iteration, as the run's detector named it.
    pub laggard: Vec<Option<u32>>,
    /// Each worker's unit durations, µs (without a units table: its mean time
    /// per unit in each iteration, from the workers table).
    pub unit_us: Vec<Vec<u32>>,
    /// Units of zero duration.
    pub zero_units: u64,
    /// Worker rows absent (a worker missing from an iteration).
    pub missing_rows: u64,
    /// The run's online predictions against what happened: (predicted,
    /// actual) time per unit, µs, for every worker row that has one.
    pub predictions: Vec<(f64, f64)>,
}

/// Why a trace cannot be analysed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The trace could not be read (names the file).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// No worker rows at all.
    #[error("{0}: the trace holds no worker rows (an empty run, or not a finished one)")]
    Empty(String),
    /// More workers than the analysis holds.
    #[error("{path}: worker {worker} is out of range (at most {max} workers are analysed)")]
    TooManyWorkers {
        /// The trace.
        path: String,
        /// The worker index found.
        worker: u32,
        /// The limit.
        max: usize,
    },
}

/// A worker row as kept while reading: worker, (busy, transit) µs, rows,
/// barrier wait µs, units.
type Row = (u32, (u64, u64), u32, u64, u32);

/// Workers beyond this are refused (the analysis keeps a dense table).
pub const MAX_WORKERS: usize = 1 << 20;

/// Reads the `workers`, `iterations` and `units` tables of `dir`.
pub fn load(dir: &Path) -> Result<Observed, LoadError> {
    let mut stamp = None;
    // (iteration, worker) → (busy, rows, barrier)
    let mut rows: BTreeMap<u64, Vec<Row>> = BTreeMap::new();
    let mut workers = 0usize;
    let too_many = |worker: u32| LoadError::TooManyWorkers {
        path: dir.display().to_string(),
        worker,
        max: MAX_WORKERS,
    };
    let mut bad_worker = None;
    let mut predictions = Vec::new();
    for_each_part(
        dir,
        TraceTable::Workers,
        read_workers_file,
        |part| {
            for r in part.records {
                if let (Some(p), true) = (r.predicted_unit_us, r.units > 0) {
                    predictions.push((p, r.busy_us as f64 / f64::from(r.units)));
                }
                if r.worker as usize >= MAX_WORKERS {
                    bad_worker.get_or_insert(r.worker);
                    continue;
                }
                workers = workers.max(r.worker as usize + 1);
                rows.entry(r.iteration).or_default().push((
                    r.worker,
                    (r.busy_us, r.transit_us + r.params_transit_us),
                    u32::try_from(r.rows).unwrap_or(u32::MAX),
                    r.barrier_wait_us,
                    r.units,
                ));
            }
            Ok(())
        },
        &mut stamp,
    )?;
    if let Some(w) = bad_worker {
        return Err(too_many(w));
    }
    if rows.is_empty() {
        return Err(LoadError::Empty(dir.display().to_string()));
    }
    let mut observed = Observed {
        workers,
        predictions,
        ..Observed::default()
    };
    // Each worker's mean time per unit in each iteration, for a trace without
    // a units table (a synthetic one).
    let mut mean_unit_us: Vec<Vec<u32>> = vec![Vec::new(); workers];
    for (iteration, list) in rows {
        let mut busy = vec![MISSING; workers];
        let mut r = vec![0u32; workers];
        let mut barrier = vec![0u64; workers];
        let mut transit = vec![0u64; workers];
        for (w, (b, took), n, wait, units) in list {
            transit[w as usize] = took;
            if units > 0 {
                let per_unit = b / u64::from(units);
                mean_unit_us[w as usize].push(u32::try_from(per_unit).unwrap_or(u32::MAX));
            }
            let b = b + took;
            busy[w as usize] = b;
            r[w as usize] = n;
            barrier[w as usize] = wait;
        }
        observed.missing_rows += busy.iter().filter(|&&b| b == MISSING).count() as u64;
        observed.iterations.push(iteration);
        observed.wall.push(
            busy.iter()
                .filter(|&&b| b != MISSING)
                .copied()
                .max()
                .unwrap_or(0),
        );
        observed.laggard.push(None);
        observed.busy.push(busy);
        observed.rows.push(r);
        observed.barrier.push(barrier);
        observed.send.push(vec![0; workers]);
        observed.transit.push(transit);
    }
    let index: BTreeMap<u64, usize> = observed
        .iterations
        .iter()
        .enumerate()
        .map(|(i, &it)| (it, i))
        .collect();
    for_each_part(
        dir,
        TraceTable::Iterations,
        read_iterations_file,
        |part| {
            for r in part.records {
                if let Some(&i) = index.get(&r.iteration) {
                    observed.wall[i] = r.wall_us.max(observed.wall[i]);
                    observed.laggard[i] = r.laggard;
                }
            }
            Ok(())
        },
        &mut stamp,
    )?;
    observed.unit_us = vec![Vec::new(); workers];
    let mut zero = 0u64;
    for_each_part(
        dir,
        TraceTable::Units,
        read_units_file,
        |part| {
            for u in part.records {
                let us = u.end_us.saturating_sub(u.start_us);
                zero += u64::from(us == 0);
                if let Some(list) = observed.unit_us.get_mut(u.worker as usize) {
                    list.push(u32::try_from(us).unwrap_or(u32::MAX));
                }
                let at = index.get(&u.iteration).copied();
                if let Some(send) = at.and_then(|i| observed.send[i].get_mut(u.worker as usize)) {
                    *send += u.send_us;
                }
            }
            Ok(())
        },
        &mut stamp,
    )?;
    observed.zero_units = zero;
    if observed.unit_us.iter().all(Vec::is_empty) {
        observed.unit_us = mean_unit_us;
    }
    observed.stamp = stamp;
    Ok(observed)
}
