//! Ratings in RecBole's atomic `.inter` format (MovieLens-100K as
//! `recbole==1.2.1` ships it) into a table of `user`, `item`, `rating` and
//! `timestamp`.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

/// The header RecBole writes: each field's name and type.
const HEADER: [&str; 4] = [
    "user_id:token",
    "item_id:token",
    "rating:float",
    "timestamp:float",
];

/// The ratings of a RecBole `.inter` file: a tab-separated header naming
/// `HEADER`'s fields, then one rating a line; user and item ids positive
/// integers, the rating in 1..=5, the timestamp a non-negative integer
/// (seconds since 1970). Every problem names its line.
pub fn ratings_batch(text: &str) -> Result<RecordBatch, String> {
    let mut lines = text.lines().enumerate();
    let header: Vec<&str> = lines
        .next()
        .map(|(_, l)| l.trim_end_matches('\r').split('\t').collect())
        .unwrap_or_default();
    if header != HEADER {
        return Err(format!(
            "line 1 is the header {header:?}, expected {:?}",
            HEADER
        ));
    }
    let (mut users, mut items, mut ratings, mut times) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, line) in lines {
        let line_no = i + 1;
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let [user, item, rating, time] = fields[..] else {
            return Err(format!(
                "line {line_no} has {} fields, expected 4",
                fields.len()
            ));
        };
        let id = |name: &str, field: &str| {
            field.parse::<i64>().ok().filter(|&v| v > 0).ok_or_else(|| {
                format!("line {line_no} {name} is '{field}', not a positive integer")
            })
        };
        users.push(id("user_id", user)?);
        items.push(id("item_id", item)?);
        let r: f64 = rating
            .parse()
            .ok()
            .filter(|r: &f64| (1.0..=5.0).contains(r))
            .ok_or_else(|| format!("line {line_no} rating is '{rating}', not in 1..=5"))?;
        ratings.push(r);
        let t: i64 = time.parse().ok().filter(|&t: &i64| t >= 0).ok_or_else(|| {
            format!("line {line_no} timestamp is '{time}', not a non-negative integer")
        })?;
        times.push(t);
    }
    let schema = Schema::new(vec![
        Field::new("user", DataType::Int64, false),
        Field::new("item", DataType::Int64, false),
        Field::new("rating", DataType::Float64, false),
        Field::new("timestamp", DataType::Int64, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(users)),
        Arc::new(Int64Array::from(items)),
        Arc::new(Float64Array::from(ratings)),
        Arc::new(Int64Array::from(times)),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n";

    #[test]
    fn ratings_are_read_with_their_types() {
        let batch = ratings_batch(&format!(
            "{HEAD}196\t242\t3\t881250949\n186\t302\t5\t891717742\n"
        ))
        .expect("parses");
        assert_eq!((batch.num_rows(), batch.num_columns()), (2, 4));
        let names: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["user", "item", "rating", "timestamp"]);
        let rating = batch
            .column(2)
            .as_any()
            .downcast_ref::<Float64Array>()
            .expect("f64");
        assert_eq!(rating.values(), &[3.0, 5.0]);
    }

    #[test]
    fn every_bad_line_is_named() {
        let cases = [
            ("u\ti\tr\tt\n".to_owned(), "line 1 is the header"),
            (
                format!("{HEAD}1\t2\t3\n"),
                "line 2 has 3 fields, expected 4",
            ),
            (
                format!("{HEAD}1\t2\t3\t4\n0\t2\t3\t4\n"),
                "line 3 user_id is '0'",
            ),
            (format!("{HEAD}1\tx\t3\t4\n"), "line 2 item_id is 'x'"),
            (
                format!("{HEAD}1\t2\t6\t4\n"),
                "line 2 rating is '6', not in 1..=5",
            ),
            (format!("{HEAD}1\t2\tnan\t4\n"), "line 2 rating is 'nan'"),
            (format!("{HEAD}1\t2\t3\t-4\n"), "line 2 timestamp is '-4'"),
        ];
        for (text, expected) in cases {
            let err = ratings_batch(&text).expect_err(expected);
            assert!(err.starts_with(expected), "{err} (expected {expected})");
        }
        assert!(ratings_batch("").is_err(), "no header");
    }
}
