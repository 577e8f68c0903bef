//! Datasets: read a table, check it, split it, featurise it, and cut it into
//! partitions and work units.
//!
//! Most callers use [`load_dataset`] and then [`Partitioning`].

pub mod features;
pub mod fetch;
pub mod images;
pub mod npz;
pub mod partition;
pub mod rows;
pub mod synth;
pub mod table;

use std::path::{Path, PathBuf};

pub use features::{FeatureMap, SparseRows};
pub use partition::{Partitioning, Sampling, UnitKey, UnitRows};
pub use rows::{DataRow, LabelledRows, LocalRows, RowBlock, RowSource};
pub use table::{read_parquet_metadata, read_parquet_table, Column, Table};

use crate::rng;

/// Errors met while loading a dataset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file could not be opened.
    #[error("failed to open dataset {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not Parquet at all (it lacks Parquet's leading magic
    /// bytes): most often a CSV or another table format.
    #[error("dataset {path} is not a Parquet file (it does not begin with Parquet's PAR1{hint}); the tabular workloads read Parquet: pandas converts a CSV with pd.read_csv(CSV).to_parquet(PARQUET)")]
    NotParquet {
        /// The file.
        path: PathBuf,
        /// What it seems to be instead, if it is text.
        hint: &'static str,
    },
    /// The file is not readable Parquet.
    #[error("dataset {path} is not a readable Parquet file")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A record batch could not be decoded.
    #[error("failed to decode dataset {path}")]
    Arrow {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: arrow_schema::ArrowError,
    },
    /// A column has a type we cannot use as a feature.
    #[error("dataset {path}: column '{column}' has type {found}; only text and integer or float columns are supported")]
    ColumnType {
        /// The file.
        path: PathBuf,
        /// The column.
        column: String,
        /// Its Arrow type.
        found: String,
    },
    /// The label column is not there.
    #[error("dataset {path} has no label column '{label}' (columns: {columns})")]
    MissingLabel {
        /// The file.
        path: PathBuf,
        /// The label column asked for.
        label: String,
        /// The columns the file has.
        columns: String,
    },
    /// A value is null or not a finite number.
    #[error("dataset {path}: column '{column}' row {row} is {what}")]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The column.
        column: String,
        /// Zero-based row.
        row: usize,
        /// "null", "NaN" or "infinite".
        what: &'static str,
    },
    /// The label does not take exactly the two expected values.
    #[error("dataset {path}: label column '{label}' must be binary; {problem}")]
    Label {
        /// The file.
        path: PathBuf,
        /// The label column.
        label: String,
        /// What is wrong.
        problem: String,
    },
    /// A column to drop is not in the file.
    #[error("dataset {path} has no column '{column}' to drop (columns: {columns})")]
    MissingDrop {
        /// The file.
        path: PathBuf,
        /// The column asked for.
        column: String,
        /// The columns the file has.
        columns: String,
    },
    /// Too few rows for the asked split and partitioning.
    #[error(
        "dataset {path} has {rows} training rows, fewer than the {partitions} partitions asked for"
    )]
    TooFewRows {
        /// The file.
        path: PathBuf,
        /// Training rows.
        rows: usize,
        /// Partitions asked for.
        partitions: u32,
    },
    /// The model kind a job names cannot train on this dataset.
    #[error("dataset {path} does not fit model kind {kind}: {problem}")]
    Unfit {
        /// The file.
        path: PathBuf,
        /// The `[model] kind`.
        kind: &'static str,
        /// What does not fit.
        problem: String,
    },
}

/// Result type of this module.
pub type Result<T, E = DataError> = std::result::Result<T, E>;

/// The seed of the train/test split. It is fixed, not the job's seed, so every
/// job on a dataset is evaluated on the same test rows.
pub const SPLIT_SEED: u64 = 0x005E_ED0F_AD01;

/// What to load and how to split it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DataConfig {
    /// Parquet file.
    pub path: PathBuf,
    /// Name of the binary label column.
    pub label: String,
    /// Value of the label column that means the positive class (text labels); a
    /// numeric label is positive when it equals 1.
    pub positive: String,
    /// Columns to ignore.
    pub drop: Vec<String>,
    /// Share of rows held out for testing, chosen by a seeded hash of the row index.
    pub test_fraction: f64,
    /// MD5 and SHA-256 of an image file (`.npz`): which copy of the dataset
    /// the job trains on (PneumoniaMNIST's own file or a derived copy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksums: Option<fetch::FileChecksums>,
    /// The seed of the train/test split, when not [`SPLIT_SEED`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_seed: Option<u64>,
    /// Evaluate on this share of the training part instead of the test part
    /// (which is then not read at all): for choosing hyperparameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_fraction: Option<f64>,
}

/// Salt of the validation slice's hash, so it is not the test split's.
const VALIDATION_SALT: u64 = 0x7A11_DA7E;

impl DataConfig {
    /// The training and evaluation rows of a table of `rows` rows, ascending:
    /// a seeded hash of each row's index puts it in the test part with
    /// probability `test_fraction`; with a validation slice, the evaluation
    /// rows are that share of the training part, hashed again, and the test
    /// part is left out.
    pub fn split(&self, rows: usize) -> (Vec<u32>, Vec<u32>) {
        let seed = self.split_seed.unwrap_or(SPLIT_SEED);
        let (train, test): (Vec<u32>, Vec<u32>) =
            (0..rows as u32).partition(|&r| rng::uniform(&[seed, r as u64]) >= self.test_fraction);
        match self.validation_fraction {
            None => (train, test),
            Some(_) => self.validation_slice(train),
        }
    }

    /// `train` cut into the rows that still train and the validation slice
    /// (`validation_fraction` of them, by a seeded hash of the row index);
    /// without a validation fraction, all train and the slice is empty.
    pub fn validation_slice(&self, train: Vec<u32>) -> (Vec<u32>, Vec<u32>) {
        let seed = self.split_seed.unwrap_or(SPLIT_SEED);
        let v = self.validation_fraction.unwrap_or(0.0);
        train
            .into_iter()
            .partition(|&r| rng::uniform(&[seed, VALIDATION_SALT, r as u64]) >= v)
    }
}

/// Labelled sparse rows with their train/test split: every workload's data.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Feature rows of every row of the file, train and test.
    pub rows: SparseRows,
    /// The class of every row as a number: 1.0 / 0.0 for a binary label, the
    /// class index for a multiclass one.
    pub labels: Vec<f64>,
    /// Indices of training rows, ascending.
    pub train: Vec<u32>,
    /// Indices of test rows, ascending.
    pub test: Vec<u32>,
    /// Name of every feature, by index (`bias`, `age`, `workclass=Private`, a pixel …).
    pub feature_names: Vec<String>,
}

impl Dataset {
    /// Number of features, bias included.
    pub fn dims(&self) -> usize {
        self.feature_names.len()
    }

    /// Share of the test rows in their most frequent class.
    pub fn test_majority_rate(&self) -> f64 {
        let mut counts: std::collections::BTreeMap<u64, usize> = Default::default();
        for &r in &self.test {
            *counts.entry(self.labels[r as usize].to_bits()).or_default() += 1;
        }
        let most = counts.values().copied().max().unwrap_or(0);
        most as f64 / self.test.len().max(1) as f64
    }

    /// The value of the categorical column `column` in every training row
    /// (in `train`'s order), numbered by its one-hot features
    /// `column=value`; a row with no such feature takes the number after
    /// the last. `None` when no feature belongs to the column.
    pub fn train_groups(&self, column: &str) -> Option<Vec<u32>> {
        let prefix = format!("{column}=");
        let mut value_of: Vec<Option<u32>> = vec![None; self.feature_names.len()];
        let mut values = 0u32;
        for (f, name) in self.feature_names.iter().enumerate() {
            if name.starts_with(&prefix) {
                value_of[f] = Some(values);
                values += 1;
            }
        }
        if values == 0 {
            return None;
        }
        let groups = self
            .train
            .iter()
            .map(|&r| {
                let (idx, val) = self.rows.row(r as usize);
                idx.iter()
                    .zip(val)
                    .filter(|(_, &x)| x != 0.0)
                    .find_map(|(&f, _)| value_of.get(f as usize).copied().flatten())
                    .unwrap_or(values)
            })
            .collect();
        Some(groups)
    }

    /// Every row with its label, for reading by global row index.
    pub fn source(&self) -> LabelledRows<'_> {
        LabelledRows {
            features: &self.rows,
            labels: &self.labels,
        }
    }
}

/// What the label column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelKind {
    /// Two classes: `config.positive` (or the number 1) and one other value.
    Binary,
    /// Classes numbered 0..K−1 (integers); K ≥ 2.
    Classes,
}

/// Loads, checks and featurises the binary-classification dataset described by `config`.
pub fn load_dataset(config: &DataConfig) -> Result<Dataset> {
    load_dataset_with(config, LabelKind::Binary)
}

/// Loads, checks and featurises the dataset described by `config`, reading
/// its label as `kind` says.
pub fn load_dataset_with(config: &DataConfig, kind: LabelKind) -> Result<Dataset> {
    let table = read_parquet_table(&config.path)?;
    build_dataset_with(&config.path, table, config, kind)
}

/// Builds a binary-classification dataset from a table already in memory
/// (`path` is only for messages).
pub fn build_dataset(path: &Path, table: Table, config: &DataConfig) -> Result<Dataset> {
    build_dataset_with(path, table, config, LabelKind::Binary)
}

/// Builds a dataset from a table already in memory, reading its label as
/// `kind` says (`path` is only for messages).
pub fn build_dataset_with(
    path: &Path,
    mut table: Table,
    config: &DataConfig,
    kind: LabelKind,
) -> Result<Dataset> {
    let err_path = || path.to_owned();
    for column in &config.drop {
        let Some(i) = table.names.iter().position(|n| n == column) else {
            return Err(DataError::MissingDrop {
                path: err_path(),
                column: column.clone(),
                columns: table.names.join(", "),
            });
        };
        table.names.remove(i);
        table.columns.remove(i);
    }
    let label_column = table
        .column(&config.label)
        .ok_or_else(|| DataError::MissingLabel {
            path: err_path(),
            label: config.label.clone(),
            columns: table.names.join(", "),
        })?;
    let labels = match kind {
        LabelKind::Binary => binary_labels(path, config, label_column)?,
        LabelKind::Classes => class_labels(path, config, label_column)?,
    };
    for (name, column) in table.names.iter().zip(&table.columns) {
        check_values(path, name, column)?;
    }
    let (train, test) = config.split(table.rows());
    let features = FeatureMap::fit(&table, &config.label, &train);
    let rows = features.transform(&table);
    Ok(Dataset {
        rows,
        labels,
        train,
        test,
        feature_names: features.names,
    })
}

/// The most classes a multiclass label may have.
pub const MAX_CLASSES: usize = 1000;

fn class_labels(path: &Path, config: &DataConfig, column: &Column) -> Result<Vec<f64>> {
    let label_err = |problem: String| DataError::Label {
        path: path.to_owned(),
        label: config.label.clone(),
        problem,
    };
    let Column::Number(values) = column else {
        return Err(DataError::Unfit {
            path: path.to_owned(),
            kind: "softmax",
            problem: format!(
                "label column '{}' holds text; softmax needs class numbers 0..K-1",
                config.label
            ),
        });
    };
    let mut labels = Vec::with_capacity(values.len());
    for (row, v) in values.iter().enumerate() {
        let x = v.ok_or_else(|| label_err(format!("row {row} is null")))?;
        if !(x >= 0.0 && x.fract() == 0.0 && x < MAX_CLASSES as f64) {
            return Err(label_err(format!(
                "row {row} is {x}, not a class number in 0..{MAX_CLASSES}"
            )));
        }
        labels.push(x);
    }
    let classes = labels.iter().fold(0.0f64, |m, &y| m.max(y)) as usize + 1;
    if classes < 2 {
        return Err(label_err(format!(
            "all {} rows are in class 0; softmax needs at least two classes",
            labels.len()
        )));
    }
    Ok(labels)
}

fn binary_labels(path: &Path, config: &DataConfig, column: &Column) -> Result<Vec<f64>> {
    let label_err = |problem: String| DataError::Label {
        path: path.to_owned(),
        label: config.label.clone(),
        problem,
    };
    let labels: Vec<f64> = match column {
        Column::Text(values) => {
            let mut other: Option<&str> = None;
            let mut out = Vec::with_capacity(values.len());
            for (row, v) in values.iter().enumerate() {
                let v = v
                    .as_deref()
                    .ok_or_else(|| label_err(format!("row {row} is null")))?;
                if v == config.positive {
                    out.push(1.0);
                } else {
                    match other {
                        None => other = Some(v),
                        Some(o) if o == v => {}
                        Some(o) => {
                            return Err(label_err(format!(
                                "it has values '{}', '{o}' and '{v}' (row {row})",
                                config.positive
                            )))
                        }
                    }
                    out.push(0.0);
                }
            }
            out
        }
        Column::Number(values) => values
            .iter()
            .enumerate()
            .map(|(row, v)| match v {
                Some(x) if *x == 1.0 => Ok(1.0),
                Some(x) if *x == 0.0 => Ok(0.0),
                Some(x) => Err(label_err(format!("row {row} is {x}, not 0 or 1"))),
                None => Err(label_err(format!("row {row} is null"))),
            })
            .collect::<Result<_>>()?,
    };
    let positives = labels.iter().filter(|&&y| y == 1.0).count();
    if positives == 0 || positives == labels.len() {
        return Err(label_err(format!(
            "all {} rows are in one class (positive value '{}')",
            labels.len(),
            config.positive
        )));
    }
    Ok(labels)
}

fn check_values(path: &Path, name: &str, column: &Column) -> Result<()> {
    let bad = |row, what| DataError::BadValue {
        path: path.to_owned(),
        column: name.to_owned(),
        row,
        what,
    };
    match column {
        Column::Number(values) => {
            for (row, v) in values.iter().enumerate() {
                match v {
                    None => return Err(bad(row, "null")),
                    Some(x) if x.is_nan() => return Err(bad(row, "NaN")),
                    Some(x) if x.is_infinite() => return Err(bad(row, "infinite")),
                    Some(_) => {}
                }
            }
        }
        Column::Text(values) => {
            if let Some(row) = values.iter().position(Option::is_none) {
                return Err(bad(row, "null"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> DataConfig {
        DataConfig {
            path: "mem.parquet".into(),
            label: "y".into(),
            positive: "yes".into(),
            drop: Vec::new(),
            test_fraction: 0.25,
            checksums: None,
            split_seed: None,
            validation_fraction: None,
        }
    }

    fn table(x: Vec<Option<f64>>, y: Vec<Option<String>>) -> Table {
        Table {
            names: vec!["x".into(), "y".into()],
            columns: vec![Column::Number(x), Column::Text(y)],
        }
    }

    fn yes_no(n: usize) -> Vec<Option<String>> {
        (0..n)
            .map(|i| Some(if i % 2 == 0 { "yes" } else { "no" }.to_owned()))
            .collect()
    }

    #[test]
    fn nan_is_rejected_with_column_and_row() {
        let t = table(vec![Some(1.0), Some(f64::NAN), Some(2.0)], yes_no(3));
        let err = build_dataset(Path::new("d.parquet"), t, &config()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dataset d.parquet: column 'x' row 1 is NaN"
        );
    }

    #[test]
    fn null_is_rejected() {
        let t = table(vec![Some(1.0), None], yes_no(2));
        let err = build_dataset(Path::new("d.parquet"), t, &config()).unwrap_err();
        assert!(
            err.to_string().contains("column 'x' row 1 is null"),
            "{err}"
        );
    }

    #[test]
    fn missing_label_lists_columns() {
        let t = table(vec![Some(1.0)], yes_no(1));
        let mut c = config();
        c.label = "income".into();
        let err = build_dataset(Path::new("d.parquet"), t, &c).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dataset d.parquet has no label column 'income' (columns: x, y)"
        );
    }

    #[test]
    fn three_label_values_are_rejected() {
        let mut y = yes_no(4);
        y[3] = Some("maybe".into());
        let t = table(vec![Some(1.0); 4], y);
        let err = build_dataset(Path::new("d.parquet"), t, &config()).unwrap_err();
        assert!(err.to_string().contains("'maybe'"), "{err}");
    }

    #[test]
    fn dropped_columns_are_not_features_and_must_exist() {
        let t = table((0..8).map(|i| Some(i as f64)).collect(), yes_no(8));
        let mut c = config();
        c.drop = vec!["x".into()];
        let d = build_dataset(Path::new("d.parquet"), t.clone(), &c).unwrap();
        assert_eq!(d.feature_names, ["bias"]);
        c.drop = vec!["id".into()];
        let err = build_dataset(Path::new("d.parquet"), t, &c).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dataset d.parquet has no column 'id' to drop (columns: x, y)"
        );
    }

    #[test]
    fn split_is_seeded_and_disjoint() {
        let n = 4000;
        let t = table((0..n).map(|i| Some(i as f64)).collect(), yes_no(n));
        let d = build_dataset(Path::new("d.parquet"), t.clone(), &config()).unwrap();
        assert_eq!(d.train.len() + d.test.len(), n);
        let share = d.test.len() as f64 / n as f64;
        assert!((share - 0.25).abs() < 0.03, "test share {share}");
        let again = build_dataset(Path::new("d.parquet"), t, &config()).unwrap();
        assert_eq!(d.test, again.test);
    }
}
