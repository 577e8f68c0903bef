//! Where a replay's timings come from: a trace's units table (every unit's
//! recorded duration), or — for traces without one, such as `forestall trace
//! synth` at 10,000 workers — its workers table, each worker's iteration cut
//! into its recorded number of equal units. The workers table is read one part
//! at a time and kept as 16 bytes per (iteration, worker).

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use super::{timings_from_trace, timings_of, Clock, IterationTimings, TimedUnit, WhatIfError};
use crate::data::UnitKey;
use crate::trace::{
    for_each_part, read_iterations, read_trace_dir, read_workers_file, TraceError, TraceTable,
};

/// One worker's iteration as the workers table has it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Cell {
    /// Units it computed (0: no row).
    pub units: u32,
    /// Rows they covered (0: unknown; each unit then counts as one row).
    pub rows: u32,
    /// Its busy time, µs.
    pub busy_us: u64,
}

/// Per-(iteration, worker) timings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkerTimings {
    /// Iteration numbers, ascending.
    pub iterations: Vec<u64>,
    /// Workers.
    pub workers: usize,
    /// `cells[i][w]`.
    pub cells: Vec<Vec<Cell>>,
    /// Each iteration's overhead beyond its slowest worker, µs.
    pub overhead_us: Vec<u64>,
    /// Micro-batches of every unit (a workers table does not say; 1).
    pub micro_batches: u32,
}

/// A trace's timings, ready to replay.
#[derive(Debug, Clone, PartialEq)]
pub enum Timings {
    /// From the units table.
    Units(Vec<IterationTimings>),
    /// From the units table of a trace whose slowdowns follow the clock: the
    /// costs without them, and the slowdowns by worker over the job clock.
    Clocked(Vec<IterationTimings>, Arc<Clock>),
    /// From the workers table.
    Workers(WorkerTimings),
}

/// Why a trace's timings cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The trace cannot be replayed.
    #[error("{path}: {why}")]
    WhatIf {
        /// The trace.
        path: String,
        /// Why (in the message, not a source: said once).
        why: WhatIfError,
    },
}

impl Timings {
    /// Reads the trace directory `dir`.
    pub fn load(dir: &Path) -> Result<Timings, SourceError> {
        let units_dir = dir.join(TraceTable::Units.name());
        let has_units = std::fs::read_dir(&units_dir).is_ok_and(|mut d| d.next().is_some());
        let empty = |why| SourceError::WhatIf {
            path: dir.display().to_string(),
            why,
        };
        if has_units {
            let trace = read_trace_dir(dir)?;
            let sending = trace.units.iter().filter(|u| u.send_us > 0).count();
            if sending > 0 {
                return Err(empty(WhatIfError::SlowLinks { units: sending }));
            }
            if !trace.units.is_empty() {
                let start_us = trace
                    .iterations
                    .first()
                    .map(|i| i.start_us)
                    .or_else(|| trace.units.iter().map(|u| u.start_us).min())
                    .unwrap_or(0);
                return match Clock::from_units(&trace.units, start_us) {
                    Some(clock) => {
                        timings_of(&trace, true).map(|t| Timings::Clocked(t, Arc::new(clock)))
                    }
                    None => timings_from_trace(&trace).map(Timings::Units),
                }
                .map_err(empty);
            }
        }
        // iteration → its workers' cells (grown as workers appear).
        let mut by_iteration: std::collections::BTreeMap<u64, Vec<Cell>> = Default::default();
        let mut stamp = None;
        for_each_part(
            dir,
            TraceTable::Workers,
            read_workers_file,
            |part| {
                for r in &part.records {
                    let row = by_iteration.entry(r.iteration).or_default();
                    let w = r.worker as usize;
                    if row.len() <= w {
                        row.resize(w + 1, Cell::default());
                    }
                    row[w] = Cell {
                        units: r.units,
                        rows: u32::try_from(r.rows).unwrap_or(u32::MAX),
                        busy_us: r.busy_us,
                    };
                }
                Ok(())
            },
            &mut stamp,
        )?;
        if by_iteration.is_empty() {
            return Err(empty(WhatIfError::EmptyTrace));
        }
        let workers = by_iteration.values().map(Vec::len).max().unwrap_or(0);
        let iterations: Vec<u64> = by_iteration.keys().copied().collect();
        let cells: Vec<Vec<Cell>> = by_iteration
            .into_values()
            .map(|mut row| {
                row.resize(workers, Cell::default());
                row
            })
            .collect();
        let mut overhead_us = vec![0; iterations.len()];
        let records = read_iterations(dir, &mut stamp)?;
        for (k, r) in records.iter().enumerate() {
            let Ok(i) = iterations.binary_search(&r.iteration) else {
                continue;
            };
            let span = records
                .get(k + 1)
                .map_or(r.wall_us, |next| next.start_us.saturating_sub(r.start_us));
            let longest = cells[i].iter().map(|c| c.busy_us).max().unwrap_or(0);
            overhead_us[i] = span.saturating_sub(longest);
        }
        Ok(Timings::Workers(WorkerTimings {
            iterations,
            workers,
            cells,
            overhead_us,
            micro_batches: 1,
        }))
    }

    /// Every worker's iteration cut into `units` equal units (rows and time
    /// shared evenly), whatever the trace recorded: a trace with one unit per
    /// worker and iteration (an import) gives the policies work to move.
    pub fn split(self, units: u32) -> Timings {
        let units = units.max(1);
        match self {
            Timings::Workers(mut t) => {
                for cell in t.cells.iter_mut().flatten().filter(|c| c.units > 0) {
                    cell.units = units;
                }
                Timings::Workers(t)
            }
            Timings::Units(list) => Timings::Units(split_units(list, units)),
            Timings::Clocked(list, clock) => Timings::Clocked(split_units(list, units), clock),
        }
    }

    /// Every unit computed in `micro_batches` micro-batches, whatever the
    /// trace recorded (a workers-only trace, or one written before schema
    /// version 6, does not record them): what a unit's rest handed over in
    /// flight needs.
    pub fn micro_batched(self, micro_batches: u32) -> Timings {
        let set = |mut list: Vec<IterationTimings>| {
            for unit in list.iter_mut().flat_map(|t| t.own.iter_mut().flatten()) {
                unit.micro_batches = micro_batches;
            }
            list
        };
        match self {
            Timings::Workers(mut t) => {
                t.micro_batches = micro_batches;
                Timings::Workers(t)
            }
            Timings::Units(list) => Timings::Units(set(list)),
            Timings::Clocked(list, clock) => Timings::Clocked(set(list), clock),
        }
    }

    /// Iterations.
    pub fn len(&self) -> usize {
        match self {
            Timings::Units(t) | Timings::Clocked(t, _) => t.len(),
            Timings::Workers(t) => t.iterations.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Workers.
    pub fn workers(&self) -> usize {
        match self {
            Timings::Units(t) | Timings::Clocked(t, _) => t.first().map_or(0, |t| t.own.len()),
            Timings::Workers(t) => t.workers,
        }
    }

    /// Worker-iterations absent from the trace (a worker with no units in
    /// an iteration: an imported job that lost workers). The replay leaves
    /// them out: no plan puts units on them and they offer no help.
    pub fn absent(&self) -> usize {
        match self {
            Timings::Units(t) | Timings::Clocked(t, _) => t
                .iter()
                .map(|it| it.own.iter().filter(|own| own.is_empty()).count())
                .sum(),
            Timings::Workers(t) => t
                .cells
                .iter()
                .map(|row| row.iter().filter(|c| c.units == 0).count())
                .sum(),
        }
    }

    /// Iteration `i`'s timings.
    pub fn get(&self, i: usize) -> Cow<'_, IterationTimings> {
        match self {
            Timings::Units(t) | Timings::Clocked(t, _) => Cow::Borrowed(&t[i]),
            Timings::Workers(t) => Cow::Owned(t.iteration(i)),
        }
    }

    /// The slowdowns over the job clock, when the trace's follow it.
    pub fn clock(&self) -> Option<&Clock> {
        match self {
            Timings::Clocked(_, clock) => Some(clock),
            _ => None,
        }
    }
}

/// Every worker's iterations in `list` cut into `units` equal units.
fn split_units(list: Vec<IterationTimings>, units: u32) -> Vec<IterationTimings> {
    list.into_iter()
        .map(|mut it| {
            for (w, own) in it.own.iter_mut().enumerate() {
                if own.is_empty() {
                    continue;
                }
                let us: u64 = own.iter().map(|u| u.owner_us).sum();
                let rows: u64 = own.iter().map(|u| u64::from(u.rows)).sum();
                let rows = rows.max(u64::from(units));
                let n = u64::from(units);
                let micro_batches = own[0].micro_batches;
                *own = (0..n)
                    .map(|k| TimedUnit {
                        key: UnitKey {
                            partition: w as u32,
                            unit: k as u32,
                        },
                        rows: (rows / n + u64::from(k < rows % n)) as u32,
                        owner_us: us / n + u64::from(k < us % n),
                        micro_batches,
                        rest: false,
                        piece: false,
                    })
                    .collect();
                it.us_per_row[w] = us as f64 / rows as f64;
            }
            it
        })
        .collect()
}

impl WorkerTimings {
    /// Iteration `i` with every worker's time cut into equal units.
    pub fn iteration(&self, i: usize) -> IterationTimings {
        let mut t = IterationTimings::default();
        self.iteration_into(i, &mut t);
        t
    }

    /// [`WorkerTimings::iteration`] into `t`, reusing its lists (a replay
    /// of thousands of workers would otherwise allocate one per worker and
    /// iteration).
    pub fn iteration_into(&self, i: usize, t: &mut IterationTimings) {
        let cells = &self.cells[i];
        let micro_batches = self.micro_batches;
        let rows_of = |c: &Cell| if c.rows == 0 { c.units } else { c.rows };
        let (busy, rows) = cells.iter().fold((0u64, 0u64), |(b, r), c| {
            (b + c.busy_us, r + u64::from(rows_of(c)))
        });
        let mean = busy as f64 / rows.max(1) as f64;
        t.us_per_row.clear();
        t.us_per_row.extend(cells.iter().map(|c| match rows_of(c) {
            0 => mean,
            r => c.busy_us as f64 / f64::from(r),
        }));
        t.own.resize_with(cells.len(), Vec::new);
        t.own.truncate(cells.len());
        for (w, (c, own)) in cells.iter().zip(&mut t.own).enumerate() {
            let n = u64::from(c.units);
            let rows = u64::from(rows_of(c));
            own.clear();
            own.extend((0..n).map(|u| TimedUnit {
                key: UnitKey {
                    partition: w as u32,
                    unit: u as u32,
                },
                // Equal shares; the remainders go to the first units.
                rows: (rows / n + u64::from(u < rows % n)) as u32,
                owner_us: c.busy_us / n + u64::from(u < c.busy_us % n),
                micro_batches,
                rest: false,
                piece: false,
            }));
        }
        t.iteration = self.iterations[i];
        t.overhead_us = self.overhead_us.get(i).copied().unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker with no units in an iteration is absent from it.
    #[test]
    fn workers_without_units_in_an_iteration_are_counted_absent() {
        let cell = |units| Cell {
            units,
            rows: 0,
            busy_us: u64::from(units) * 100,
        };
        let timings = Timings::Workers(WorkerTimings {
            iterations: vec![0, 1],
            workers: 3,
            cells: vec![
                vec![cell(2), cell(2), cell(2)],
                vec![cell(2), cell(0), cell(0)],
            ],
            overhead_us: vec![0, 0],
            micro_batches: 1,
        });
        assert_eq!(timings.absent(), 2);
        let units = Timings::Units(vec![
            timings.get(0).into_owned(),
            timings.get(1).into_owned(),
        ]);
        assert_eq!(units.absent(), 2);
    }

    #[test]
    fn a_workers_time_is_cut_into_equal_units_that_sum_to_it() {
        let t = WorkerTimings {
            iterations: vec![7],
            workers: 2,
            cells: vec![vec![
                Cell {
                    units: 3,
                    rows: 10,
                    busy_us: 1001,
                },
                Cell {
                    units: 2,
                    rows: 0,
                    busy_us: 40,
                },
            ]],
            overhead_us: vec![5],
            micro_batches: 1,
        };
        let it = t.iteration(0);
        assert_eq!(it.iteration, 7);
        let sum = |w: usize| it.own[w].iter().map(|u| u.owner_us).sum::<u64>();
        assert_eq!((sum(0), sum(1)), (1001, 40));
        assert_eq!(it.own[0].iter().map(|u| u.rows).sum::<u32>(), 10);
        assert_eq!(it.own[1].iter().map(|u| u.rows).collect::<Vec<_>>(), [1, 1]);
        assert!((it.us_per_row[1] - 20.0).abs() < 1e-12);

        let split = Timings::Units(vec![it]).split(4);
        let it = split.get(0);
        assert_eq!(it.own[0].len(), 4);
        assert_eq!(it.own[0].iter().map(|u| u.owner_us).sum::<u64>(), 1001);
        assert_eq!(
            it.own[1].iter().map(|u| u.rows).sum::<u32>(),
            4,
            "at least a row a unit"
        );
        assert!((it.us_per_row[1] - 10.0).abs() < 1e-12);
    }
}
