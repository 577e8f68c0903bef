//! Reads a Parquet table into plain columns: text columns and numeric columns.

use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type};
use arrow_array::types::{UInt16Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
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

/// The key-value metadata of the Parquet file at `path` (a corpus keeps its
/// vocabulary there).
pub fn read_parquet_metadata(path: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    let file = File::open(path).map_err(|source| DataError::Open {
        path: path.to_owned(),
        source,
    })?;
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
    let file = File::open(path).map_err(|source| DataError::Open {
        path: path.to_owned(),
        source,
    })?;
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
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Column::Text(Vec::new()),
            t if is_supported_number(t) => Column::Number(Vec::new()),
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
                Column::Text(values) => append_text(values, array),
                Column::Number(values) => append_numbers(values, array),
            }
        }
    }
    Ok(Table { names, columns })
}

fn is_supported_number(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Float32 | Float64
    )
}

fn append_text(out: &mut Vec<Option<String>>, array: &ArrayRef) {
    let valid = |i: usize| array.is_valid(i);
    match array.data_type() {
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            out.extend((0..a.len()).map(|i| valid(i).then(|| a.value(i).to_owned())));
        }
        DataType::LargeUtf8 => {
            let a = array.as_string::<i64>();
            out.extend((0..a.len()).map(|i| valid(i).then(|| a.value(i).to_owned())));
        }
        _ => {
            let a = array.as_string_view();
            out.extend((0..a.len()).map(|i| valid(i).then(|| a.value(i).to_owned())));
        }
    }
}

fn append_numbers(out: &mut Vec<Option<f64>>, array: &ArrayRef) {
    macro_rules! widen {
        ($t:ty) => {{
            let a = array.as_primitive::<$t>();
            out.extend((0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i) as f64)));
        }};
    }
    match array.data_type() {
        DataType::Int8 => widen!(Int8Type),
        DataType::Int16 => widen!(Int16Type),
        DataType::Int32 => widen!(Int32Type),
        DataType::Int64 => widen!(Int64Type),
        DataType::UInt8 => widen!(UInt8Type),
        DataType::UInt16 => widen!(UInt16Type),
        DataType::UInt32 => widen!(UInt32Type),
        DataType::UInt64 => widen!(UInt64Type),
        DataType::Float32 => widen!(Float32Type),
        DataType::Float64 => widen!(Float64Type),
        // Other types are rejected when the schema is read.
        _ => out.extend(std::iter::repeat_n(None, array.len())),
    }
}
