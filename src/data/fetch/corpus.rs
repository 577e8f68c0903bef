//! A bag-of-words corpus in LDA-C format (the Reuters set the PyPI package
//! `lda==3.0.2` ships for its tests) into a table of `doc`, `word`, `count`,
//! with the vocabulary and the documents' titles in the file's metadata.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

/// The documents of an LDA-C file: line d is document d, `N id:count …`
/// with N distinct word ids, each below `vocabulary` and listed once, each
/// count at least 1. One row per (document, word). Every problem names its
/// line.
pub fn ldac_batch(text: &str, vocabulary: usize) -> Result<RecordBatch, String> {
    let (mut docs, mut words, mut counts) = (Vec::new(), Vec::new(), Vec::new());
    for (d, line) in text.lines().enumerate() {
        let line_no = d + 1;
        let mut fields = line.split_whitespace();
        let n: usize = fields
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("line {line_no} does not start with its number of words"))?;
        let start = words.len();
        for pair in fields {
            let (id, count) = pair
                .split_once(':')
                .and_then(|(i, c)| Some((i.parse::<usize>().ok()?, c.parse::<i64>().ok()?)))
                .ok_or_else(|| format!("line {line_no} has '{pair}', not id:count"))?;
            if id >= vocabulary {
                return Err(format!(
                    "line {line_no} has word {id}; the vocabulary has {vocabulary}"
                ));
            }
            if count < 1 {
                return Err(format!("line {line_no} counts word {id} {count} times"));
            }
            docs.push(d as i64);
            words.push(id as i64);
            counts.push(count);
        }
        let listed = &mut words[start..];
        if listed.len() != n {
            return Err(format!(
                "line {line_no} says {n} words and lists {}",
                listed.len()
            ));
        }
        let mut sorted = listed.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("line {line_no} lists word {} twice", w[0]));
        }
    }
    let schema = Schema::new(vec![
        Field::new("doc", DataType::Int64, false),
        Field::new("word", DataType::Int64, false),
        Field::new("count", DataType::Int64, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(docs)),
        Arc::new(Int64Array::from(words)),
        Arc::new(Int64Array::from(counts)),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).map_err(|e| e.to_string())
}

/// The lines of a text file that must hold `expected` non-empty lines.
pub fn lines_of<'a>(text: &'a str, what: &str, expected: usize) -> Result<Vec<&'a str>, String> {
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    if lines.len() != expected {
        return Err(format!(
            "{what} has {} lines, expected {expected}",
            lines.len()
        ));
    }
    if let Some(i) = lines.iter().position(|l| l.trim().is_empty()) {
        return Err(format!("{what} line {} is empty", i + 1));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_become_rows_of_word_counts() {
        let batch = ldac_batch("2 0:1 3:4\n1 2:2\n", 4).expect("parses");
        assert_eq!((batch.num_rows(), batch.num_columns()), (3, 3));
        let column = |k: usize| {
            batch
                .column(k)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("i64")
                .values()
                .to_vec()
        };
        assert_eq!(column(0), [0, 0, 1]);
        assert_eq!(column(1), [0, 3, 2]);
        assert_eq!(column(2), [1, 4, 2]);
    }

    #[test]
    fn every_bad_line_is_named() {
        let cases = [
            ("x 0:1\n", "line 1 does not start with its number of words"),
            ("1 0:1\n1 7\n", "line 2 has '7', not id:count"),
            ("1 9:1\n", "line 1 has word 9; the vocabulary has 4"),
            ("1 1:0\n", "line 1 counts word 1 0 times"),
            ("3 0:1 1:1\n", "line 1 says 3 words and lists 2"),
            ("2 1:1 1:2\n", "line 1 lists word 1 twice"),
        ];
        for (text, expected) in cases {
            assert_eq!(ldac_batch(text, 4).expect_err(expected), expected);
        }
        assert_eq!(
            lines_of("a\nb\n", "tokens", 3).expect_err("count"),
            "tokens has 2 lines, expected 3"
        );
        assert_eq!(
            lines_of("a\n \n", "tokens", 2).expect_err("empty"),
            "tokens line 2 is empty"
        );
    }
}
