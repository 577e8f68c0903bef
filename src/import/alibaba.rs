//! Alibaba PAI mini-batch CSVs: `,worker,gpu,time,batch_time_norm` — an unnamed
//! row index, the worker, its GPU share (percent), the (sampled) iteration, and
//! the mini-batch time normalised to 0–1000 within the job.
//!
//! Columns are found by name, in any order, as a CSV reader finds them: the
//! row index may be left out (a copy saved without it), `gpu` too (it is
//! only checked), and a byte-order mark or quotes around the names and
//! values are read through. A named column that is none of these, or one
//! named twice, is refused.

use std::collections::BTreeMap;
use std::path::Path;

use super::{dense_ids, BadRow, ImportError, Parsed, Sample};

/// The published header, in order.
const COLUMNS: [&str; 5] = ["", "worker", "gpu", "time", "batch_time_norm"];

/// The columns a file must have.
const REQUIRED: [&str; 3] = ["worker", "time", "batch_time_norm"];

/// Normalised time units stored per µs column unit (keeps three decimals).
const SCALE: f64 = 1000.0;

/// Where a file holds each column it reads, and how many it has.
struct Columns {
    worker: usize,
    time: usize,
    norm: usize,
    gpu: Option<usize>,
    count: usize,
}

/// A field or a column's name without the spaces and quotes around it.
fn bare(field: &str) -> &str {
    let field = field.trim();
    field
        .strip_prefix('"')
        .and_then(|f| f.strip_suffix('"'))
        .unwrap_or(field)
        .trim()
}

impl Columns {
    /// The columns of `header` (names, a row index unnamed), or what is
    /// wrong with it.
    fn find(header: &[&str]) -> Result<Self, String> {
        let unknown: Vec<&&str> = header.iter().filter(|c| !COLUMNS.contains(c)).collect();
        let missing: Vec<&&str> = REQUIRED.iter().filter(|c| !header.contains(c)).collect();
        let twice: Vec<&&str> = COLUMNS[1..]
            .iter()
            .filter(|c| header.iter().filter(|h| h == c).count() > 1)
            .collect();
        if !unknown.is_empty() || !missing.is_empty() || !twice.is_empty() {
            return Err(format!(
                "header {:?}: expected \",worker,gpu,time,batch_time_norm\" in any order \
                 (the unnamed row index and gpu may be left out; unknown columns {unknown:?}, \
                 missing {missing:?}, named twice {twice:?})",
                header.join(",")
            ));
        }
        let at = |name: &str| header.iter().position(|c| *c == name);
        Ok(Self {
            worker: at("worker").expect("checked"),
            time: at("time").expect("checked"),
            norm: at("batch_time_norm").expect("checked"),
            gpu: at("gpu"),
            count: header.len(),
        })
    }
}

/// Reads one file: worker names, samples, bad rows.
pub fn read(path: &Path) -> Result<Parsed, ImportError> {
    let bytes = std::fs::read(path).map_err(|source| ImportError::Io {
        path: path.into(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        format_error(
            path,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        )
    })?;
    parse(path, &text)
}

fn format_error(path: &Path, message: String) -> ImportError {
    ImportError::Format {
        path: path.into(),
        format: "alibaba-minibatch",
        message,
    }
}

/// Parses the text of one file.
pub fn parse(path: &Path, text: &str) -> Result<Parsed, ImportError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate();
    let header: Vec<&str> = match lines.next() {
        Some((_, h)) => h.trim_end_matches('\r').split(',').map(bare).collect(),
        None => return Err(format_error(path, "the file is empty".into())),
    };
    let columns = Columns::find(&header).map_err(|m| format_error(path, m))?;
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in lines {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        match parse_row(line, &columns) {
            Ok(row) => rows.push((i + 1, row)),
            Err(reason) => bad.push(BadRow {
                place: format!("line {}", i + 1),
                reason,
            }),
        }
    }
    // One sample per (time, worker): an exact repeat is noted and dropped, a
    // conflicting one is bad.
    let mut first: BTreeMap<(u64, u64), (usize, f64)> = BTreeMap::new();
    let mut notes = Vec::new();
    for &(line, (worker, iteration, norm)) in &rows {
        match first.get(&(iteration, worker)) {
            None => {
                first.insert((iteration, worker), (line, norm));
            }
            Some(&(earlier, value)) => {
                let place = format!("line {line}");
                let reason =
                    format!("repeats (time {iteration}, worker {worker}) of line {earlier}");
                if value == norm {
                    notes.push(BadRow { place, reason });
                } else {
                    bad.push(BadRow {
                        place,
                        reason: format!(
                            "{reason} with another batch_time_norm ({norm} vs {value})"
                        ),
                    });
                }
            }
        }
    }
    let ids = dense_ids(first.keys().map(|&(_, worker)| worker));
    let samples: Vec<Sample> = first
        .iter()
        .map(|(&(iteration, worker), &(_, norm))| Sample {
            iteration,
            worker: ids[&worker],
            us: (norm * SCALE).round() as u64,
        })
        .collect();
    let workers = ids.keys().map(u64::to_string).collect();
    Ok(Parsed {
        workers,
        samples,
        bad,
        notes,
    })
}

/// (worker, iteration, normalised time) of one data line.
fn parse_row(line: &str, columns: &Columns) -> Result<(u64, u64, f64), String> {
    let fields: Vec<&str> = line.split(',').map(bare).collect();
    if fields.len() != columns.count {
        return Err(format!(
            "{} fields, expected {}",
            fields.len(),
            columns.count
        ));
    }
    // (a copy re-saved by pandas may write them as floats: "3.0")
    let int = |i: usize, name: &str| {
        let field = fields[i];
        field
            .parse::<u64>()
            .ok()
            .or_else(|| {
                let v = field.parse::<f64>().ok()?;
                (v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(53)).then_some(v as u64)
            })
            .ok_or_else(|| format!("{name}: {field:?} is not a non-negative integer"))
    };
    let worker = int(columns.worker, "worker")?;
    let iteration = int(columns.time, "time")?;
    if let Some(at) = columns.gpu {
        let gpu: f64 = fields[at]
            .parse()
            .map_err(|_| format!("gpu: {:?} is not a number", fields[at]))?;
        if !gpu.is_finite() || gpu < 0.0 {
            return Err(format!("gpu: {gpu} is not a share"));
        }
    }
    let field = fields[columns.norm];
    let norm: f64 = field
        .parse()
        .map_err(|_| format!("batch_time_norm: {field:?} is not a number"))?;
    if !norm.is_finite() || norm < 0.0 {
        return Err(format!(
            "batch_time_norm: {norm} is not a duration (NaN or negative)"
        ));
    }
    Ok((worker, iteration, norm))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = ",worker,gpu,time,batch_time_norm\n0,0,25,1,476\n1,1,25,1,509\n2,0,25,2,470.5\n3,1,25,2,900\n";

    #[test]
    fn reads_the_published_layout() {
        let Parsed {
            workers,
            samples,
            bad,
            notes,
        } = parse(Path::new("j.csv"), GOOD).expect("parses");
        assert_eq!(workers, vec!["0", "1"]);
        assert!(bad.is_empty() && notes.is_empty());
        assert_eq!(samples.len(), 4);
        assert_eq!(
            samples[2],
            Sample {
                iteration: 2,
                worker: 0,
                us: 470_500
            }
        );
    }

    /// The same samples from copies a user may hold: a byte-order mark,
    /// CRLF line ends and quotes (a spreadsheet's export), no row index
    /// (saved without it), the columns in another order, no gpu column.
    #[test]
    fn columns_are_found_by_name_in_any_order() {
        let expected = parse(Path::new("j.csv"), GOOD).expect("parses").samples;
        let copies = [
            "\u{feff}\"\",\"worker\",\"gpu\",\"time\",\"batch_time_norm\"\r\n\
             0,\"0\",25,1,476\r\n1,1,25,1,509\r\n2,0,25,2,470.5\r\n3,1,25,2,900\r\n",
            "worker,gpu,time,batch_time_norm\n0,25,1,476\n1,25,1,509\n0,25,2,470.5\n1,25,2,900\n",
            "batch_time_norm,time,worker\n476,1,0\n509,1,1\n470.5,2,0\n900,2,1\n",
            // integers written as floats, as pandas writes a column that held a NaN
            "worker,time,batch_time_norm\n0.0,1.0,476\n1,1,509\n0,2.0,470.5\n1.0,2,900\n",
        ];
        for text in copies {
            let parsed = parse(Path::new("j.csv"), text).expect("parses");
            assert_eq!(parsed.samples, expected, "{text:?}");
            assert_eq!(parsed.workers, vec!["0", "1"]);
            assert!(parsed.bad.is_empty(), "{:?}", parsed.bad);
        }
        // a column named twice, or one the format needs left out
        for (header, culprit) in [
            (
                "worker,time,time,batch_time_norm\n",
                "named twice [\"time\"]",
            ),
            (",worker,gpu,batch_time_norm\n", "missing [\"time\"]"),
        ] {
            let err = parse(Path::new("j.csv"), header).unwrap_err().to_string();
            assert!(err.contains(culprit), "{err}");
        }
    }

    #[test]
    fn bad_rows_are_named_by_line() {
        let text = format!("{GOOD}4,1,25,3,NaN\n5,1,25,4,-3\n6,x,25,5,10\n7,1,25\n8,1,25,6.5,10\n");
        let Parsed { samples, bad, .. } = parse(Path::new("j.csv"), &text).expect("parses");
        assert_eq!(samples.len(), 4);
        let places: Vec<&str> = bad.iter().map(|b| b.place.as_str()).collect();
        assert_eq!(places, ["line 6", "line 7", "line 8", "line 9", "line 10"]);
        assert!(bad[4].reason.contains("time: \"6.5\""), "{}", bad[4]);
        assert!(bad[0].reason.contains("NaN"), "{}", bad[0]);
        assert!(bad[2].reason.contains("worker"), "{}", bad[2]);
        assert!(bad[3].reason.contains("3 fields"), "{}", bad[3]);
    }

    #[test]
    fn a_wrong_header_names_the_unknown_and_missing_columns() {
        let err = parse(
            Path::new("j.csv"),
            ",worker,gpu,step,batch_time_norm,extra\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("j.csv") && err.contains("\"step\"") && err.contains("\"time\""),
            "{err}"
        );
        let err = parse(Path::new("j.csv"), "").unwrap_err().to_string();
        assert!(err.contains("empty"), "{err}");
    }

    #[test]
    fn an_exact_repeat_is_noted_and_a_conflicting_one_is_bad() {
        let text = format!("{GOOD}9,0,25,1,476\n10,1,25,1,5\n");
        let Parsed {
            samples,
            bad,
            notes,
            ..
        } = parse(Path::new("j.csv"), &text).expect("parses");
        assert_eq!(samples.len(), 4);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].place, "line 6");
        assert!(notes[0].reason.contains("line 2"), "{}", notes[0]);
        assert_eq!(bad.len(), 1);
        assert!(bad[0].reason.contains("509"), "{}", bad[0]);
        assert_eq!(samples[1].us, 509_000, "the first value is kept");
    }
}
