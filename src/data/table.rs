//! Reads a Parquet table into plain columns: text columns (strings in any
//! encoding, a pandas categorical's dictionary among them) and numeric
//! columns (integers of any width, floats), through [`crate::columns`].

use std::fs::File;
use std::path::Path;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{DataError, Result};

/// One column of a table, as read.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// A text column; `None` where the file has a null.
    Text(Vec<Option<String>>),
    /// A numeric column (any integer or float type, widened to `f64`); `None` for null.
    Number(Vec<Option<f64>>),
}

impl Column {
    fn len(&self) -> usize {
        match self {
            Column::Text(v) => v.len(),
            Column::Number(v) => v.len(),
        }
    }
}

/// A table read from a file: column names in file order and their values.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Column names, in the file's order.
    pub names: Vec<String>,
    /// Column values, parallel to `names`.
    pub columns: Vec<Column>,
}

impl Table {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, Column::len)
    }

    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|i| &self.columns[i])
    }
}

/// The Parquet file at `path`, opened; a file that is not Parquet at all
/// (no leading `PAR1`: a CSV, say) is named as such.
fn open_parquet(path: &Path) -> Result<File> {
    let open = || {
        File::open(path).map_err(|source| DataError::Open {
            path: path.to_owned(),
            source,
        })
    };
    let mut magic = [0u8; 4];
    let read = std::io::Read::read(&mut open()?, &mut magic).unwrap_or(0);
    if read == magic.len() && &magic != b"PAR1" {
        let text = magic
            .iter()
            .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace());
        return Err(DataError::NotParquet {
            path: path.to_owned(),
            hint: if text {
                ": it begins with text, a CSV?"
            } else {
                ""
            },
        });
    }
    open()
}

/// The key-value metadata of the Parquet file at `path` (a corpus keeps its
/// vocabulary there).
pub fn read_parquet_metadata(path: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    let file = open_parquet(path)?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|source| DataError::Parquet {
            path: path.to_owned(),
            source,
        })?;
    Ok(builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
        .collect())
}

/// Reads every row group of the Parquet file at `path`.
pub fn read_parquet_table(path: &Path) -> Result<Table> {
    let file = open_parquet(path)?;
    let parquet_err = |source| DataError::Parquet {
        path: path.to_owned(),
        source,
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(parquet_err)?
        .build()
        .map_err(parquet_err)?;
    let schema = arrow_array::RecordBatchReader::schema(&reader);
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let mut columns: Vec<Column> = Vec::with_capacity(names.len());
    for field in schema.fields() {
        columns.push(match field.data_type() {
            t if crate::columns::is_text(t) => Column::Text(Vec::new()),
            t if crate::columns::is_number(t) => Column::Number(Vec::new()),
            other => {
                return Err(DataError::ColumnType {
                    path: path.to_owned(),
                    column: field.name().clone(),
                    found: other.to_string(),
                })
            }
        });
    }
    for batch in reader {
        let batch = batch.map_err(|source| DataError::Arrow {
            path: path.to_owned(),
            source,
        })?;
        for (column, array) in columns.iter_mut().zip(batch.columns()) {
            match column {
                // (the types were checked against the schema above)
                Column::Text(values) => {
                    values.extend(crate::columns::strings(array.as_ref()).unwrap_or_default())
                }
                Column::Number(values) => {
                    values.extend(crate::columns::numbers(array).unwrap_or_default())
                }
            }
        }
    }
    Ok(Table { names, columns })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::types::Int8Type;
    use arrow_array::{ArrayRef, BinaryArray, DictionaryArray, RecordBatch, UInt8Array};
    use parquet::arrow::ArrowWriter;

    use super::*;

    fn write(path: &Path, columns: Vec<(&str, ArrayRef)>) {
        let batch = RecordBatch::try_from_iter(columns).expect("a batch");
        let file = File::create(path).expect("created");
        let mut writer = ArrowWriter::try_new(file, batch.schema(), None).expect("a writer");
        writer.write(&batch).expect("written");
        writer.close().expect("closed");
    }

    /// A table saved by pandas with a categorical column (a dictionary of
    /// strings) and small unsigned integers reads as text and numbers; a
    /// column of bytes is refused, named.
    #[test]
    fn dictionary_text_and_narrow_integers_read_and_bytes_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.parquet");
        let income: DictionaryArray<Int8Type> = vec![Some(">50K"), Some("<=50K"), None]
            .into_iter()
            .collect();
        write(
            &path,
            vec![
                ("income", Arc::new(income) as ArrayRef),
                (
                    "age",
                    Arc::new(UInt8Array::from(vec![Some(39), None, Some(50)])),
                ),
            ],
        );
        let table = read_parquet_table(&path).expect("reads");
        assert_eq!(table.names, ["income", "age"]);
        assert_eq!(
            table.column("income"),
            Some(&Column::Text(vec![
                Some(">50K".into()),
                Some("<=50K".into()),
                None
            ]))
        );
        assert_eq!(
            table.column("age"),
            Some(&Column::Number(vec![Some(39.0), None, Some(50.0)]))
        );
        write(
            &path,
            vec![(
                "blob",
                Arc::new(BinaryArray::from_vec(vec![b"x"])) as ArrayRef,
            )],
        );
        let err = read_parquet_table(&path).unwrap_err().to_string();
        assert!(err.contains("'blob'") && err.contains("Binary"), "{err}");
    }

    /// A CSV given as a dataset is named as not Parquet, with how to convert
    /// it; a Parquet file cut short is still "not a readable Parquet file".
    #[test]
    fn a_csv_is_named_as_not_parquet() {
        let dir = tempfile::tempdir().expect("temp dir");
        let csv = dir.path().join("adult.csv");
        std::fs::write(&csv, "age,income\n39,<=50K\n").expect("written");
        let err = read_parquet_table(&csv).unwrap_err().to_string();
        assert!(
            err.contains("is not a Parquet file")
                && err.contains("a CSV?")
                && err.contains("to_parquet"),
            "{err}"
        );
        let cut = dir.path().join("cut.parquet");
        write(
            &cut,
            vec![(
                "age",
                Arc::new(UInt8Array::from(vec![Some(39)])) as ArrayRef,
            )],
        );
        let bytes = std::fs::read(&cut).expect("read");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("cut");
        let err = read_parquet_table(&cut).unwrap_err().to_string();
        assert!(err.contains("is not a readable Parquet file"), "{err}");
    }
}
