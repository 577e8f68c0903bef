//! Turns a table into sparse feature rows: a bias, standardised numeric columns and
//! one-hot categorical columns, with every statistic taken from the training rows.

use std::collections::BTreeMap;

use super::table::{Column, Table};

/// Sparse rows in compressed-row form. Row `r` holds the pairs
/// `indices[offsets[r]..offsets[r + 1]]` / `values[..]`; index 0 is the bias.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseRows {
    /// Start of each row in `indices`/`values`; `rows + 1` entries.
    pub offsets: Vec<usize>,
    /// Feature index of each stored value.
    pub indices: Vec<u32>,
    /// Stored values.
    pub values: Vec<f64>,
}

impl SparseRows {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The (index, value) pairs of row `r`.
    #[inline]
    pub fn row(&self, r: usize) -> (&[u32], &[f64]) {
        let range = self.offsets[r]..self.offsets[r + 1];
        (&self.indices[range.clone()], &self.values[range])
    }
}

/// How a table's columns become features, learned from the training rows.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureMap {
    /// Name of every feature, by index (`bias`, `age`, `workclass=Private`, …).
    pub names: Vec<String>,
    columns: Vec<ColumnEncoding>,
}

#[derive(Debug, Clone, PartialEq)]
enum ColumnEncoding {
    Numeric {
        column: usize,
        index: u32,
        mean: f64,
        std: f64,
    },
    Categorical {
        column: usize,
        first_index: u32,
        levels: BTreeMap<String, u32>,
    },
}

impl FeatureMap {
    /// Learns the encoding of every column except `label` from the rows `train`.
    ///
    /// Numeric columns are standardised with the training mean and standard
    /// deviation (a constant column maps to 0); text columns are one-hot encoded
    /// over the levels seen in training, sorted, so a level seen only in test rows
    /// has no feature. Nulls must have been rejected before.
    pub fn fit(table: &Table, label: &str, train: &[u32]) -> Self {
        let mut names = vec!["bias".to_owned()];
        let mut columns = Vec::new();
        for (c, (name, column)) in table.names.iter().zip(&table.columns).enumerate() {
            if name == label {
                continue;
            }
            match column {
                Column::Number(values) => {
                    let n = train.len().max(1) as f64;
                    let value = |r: &u32| values[*r as usize].unwrap_or(0.0);
                    let mean = train.iter().map(value).sum::<f64>() / n;
                    let var = train.iter().map(|r| (value(r) - mean).powi(2)).sum::<f64>() / n;
                    columns.push(ColumnEncoding::Numeric {
                        column: c,
                        index: names.len() as u32,
                        mean,
                        std: var.sqrt(),
                    });
                    names.push(name.clone());
                }
                Column::Text(values) => {
                    let mut levels: BTreeMap<String, u32> = train
                        .iter()
                        .filter_map(|r| values[*r as usize].clone())
                        .map(|level| (level, 0))
                        .collect();
                    let first_index = names.len() as u32;
                    for (i, (level, index)) in levels.iter_mut().enumerate() {
                        *index = first_index + i as u32;
                        names.push(format!("{name}={level}"));
                    }
                    columns.push(ColumnEncoding::Categorical {
                        column: c,
                        first_index,
                        levels,
                    });
                }
            }
        }
        Self { names, columns }
    }

    /// Number of features, bias included.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when there are no features at all (never: the bias is always there).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Encodes every row of `table`.
    pub fn transform(&self, table: &Table) -> SparseRows {
        let rows = table.rows();
        let mut out = SparseRows {
            offsets: Vec::with_capacity(rows + 1),
            indices: Vec::with_capacity(rows * (self.columns.len() + 1)),
            values: Vec::with_capacity(rows * (self.columns.len() + 1)),
        };
        out.offsets.push(0);
        for r in 0..rows {
            out.indices.push(0);
            out.values.push(1.0);
            for encoding in &self.columns {
                match encoding {
                    ColumnEncoding::Numeric {
                        column,
                        index,
                        mean,
                        std,
                    } => {
                        if let Column::Number(values) = &table.columns[*column] {
                            let x = values[r].unwrap_or(*mean);
                            let z = if *std > 0.0 { (x - mean) / std } else { 0.0 };
                            out.indices.push(*index);
                            out.values.push(z);
                        }
                    }
                    ColumnEncoding::Categorical { column, levels, .. } => {
                        if let Column::Text(values) = &table.columns[*column] {
                            if let Some(index) = values[r].as_ref().and_then(|l| levels.get(l)) {
                                out.indices.push(*index);
                                out.values.push(1.0);
                            }
                        }
                    }
                }
            }
            out.offsets.push(out.indices.len());
        }
        out
    }

    /// The first feature index of each categorical column (for docs and reports).
    pub fn categorical_starts(&self) -> Vec<u32> {
        self.columns
            .iter()
            .filter_map(|c| match c {
                ColumnEncoding::Categorical { first_index, .. } => Some(*first_index),
                ColumnEncoding::Numeric { .. } => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table {
            names: vec!["x".into(), "colour".into(), "y".into()],
            columns: vec![
                Column::Number(vec![Some(1.0), Some(3.0), Some(5.0), Some(100.0)]),
                Column::Text(vec![
                    Some("red".into()),
                    Some("blue".into()),
                    Some("red".into()),
                    Some("green".into()),
                ]),
                Column::Number(vec![Some(0.0), Some(1.0), Some(0.0), Some(1.0)]),
            ],
        }
    }

    #[test]
    fn statistics_come_from_training_rows_only() {
        let t = table();
        let map = FeatureMap::fit(&t, "y", &[0, 1, 2]);
        // bias, x, colour=blue, colour=red (green is only in row 3, a test row)
        assert_eq!(map.names, ["bias", "x", "colour=blue", "colour=red"]);
        let rows = map.transform(&t);
        let std = (8.0f64 / 3.0).sqrt();
        let (idx, val) = rows.row(0);
        assert_eq!(idx, [0, 1, 3]);
        assert_eq!(val[0], 1.0);
        assert!((val[1] - (1.0 - 3.0) / std).abs() < 1e-12);
        // the unseen level has no feature; the numeric value is still encoded
        let (idx, _) = rows.row(3);
        assert_eq!(idx, [0, 1]);
    }

    #[test]
    fn constant_column_encodes_to_zero() {
        let t = Table {
            names: vec!["c".into(), "y".into()],
            columns: vec![
                Column::Number(vec![Some(2.0); 3]),
                Column::Number(vec![Some(1.0); 3]),
            ],
        };
        let rows = FeatureMap::fit(&t, "y", &[0, 1, 2]).transform(&t);
        assert_eq!(rows.row(1).1, [1.0, 0.0]);
    }
}
