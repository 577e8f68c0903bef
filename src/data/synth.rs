//! `forestall data synth netflix --scale F`: a ratings table shaped like the
//! Netflix Prize set, for matrix-factorisation runs at sizes MovieLens does
//! not reach.
//!
//! At F = 1 it has Netflix's 480,189 users and 17,770 items and about 100 M
//! ratings (1–5). The users scale with F and the items stay 17,770, so the
//! ratings per user keep Netflix's distribution at every scale (a user may
//! rate thousands of movies) and the ratings scale with F:
//! - ratings per user are log-normal with Netflix's median (≈ 96) and mean
//!   (≈ 209), at least 1 and at most half the items;
//! - items are drawn by popularity weights log-normal with a mean ten times
//!   the median, as Netflix's per-movie counts are (median ≈ 561, mean ≈
//!   5,654), each item at most once per user;
//! - a rating is `3.6 + b_u + b_i + p_u · q_i + noise` (rank 5) rounded into
//!   1..=5, so a factor model has tastes to learn that biases cannot.
//!
//! Everything is keyed by the seed, users are written in order in batches
//! (memory stays bounded), and the file appears only when complete.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::rng::{self, KeyedRng};

/// Netflix Prize's users, items and ratings.
pub const NETFLIX: (u64, u64, u64) = (480_189, 17_770, 100_480_507);
/// Median and mean ratings per user in the Netflix set.
const USER_MEDIAN: f64 = 96.0;
const USER_MEAN: f64 = 209.0;
/// Mean over median of the items' popularity.
const ITEM_SKEW: f64 = 10.0;
/// Rank of the tastes the ratings come from.
const TASTE_RANK: u64 = 5;
/// Rows written per Parquet batch.
const BATCH_ROWS: usize = 1 << 20;

/// What was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthesised {
    /// Users.
    pub users: u64,
    /// Items.
    pub items: u64,
    /// Ratings.
    pub ratings: u64,
}

/// The users and items at `scale` (at least 1 user; always Netflix's items).
pub fn netflix_shape(scale: f64) -> (u64, u64) {
    let users = ((NETFLIX.0 as f64 * scale).round() as u64).max(1);
    (users, NETFLIX.1)
}

/// The command that makes a missing `netflix-synth-SCALE.parquet`, if `path`
/// is named so.
pub fn synth_hint(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let scale: f64 = name
        .strip_prefix("netflix-synth-")?
        .strip_suffix(".parquet")?
        .parse()
        .ok()?;
    Some(format!(
        "forestall data synth netflix --scale {scale} --out {}",
        path.display()
    ))
}

/// A standard normal draw from two keyed uniforms (Box–Muller).
fn normal(words: &[u64]) -> f64 {
    let mut w = words.to_vec();
    w.push(1);
    let u1 = rng::uniform(&w).max(f64::MIN_POSITIVE);
    *w.last_mut().expect("pushed") = 2;
    let u2 = rng::uniform(&w);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Writes the Netflix-shaped table at `scale` to `out` (atomically: a
/// `.tmp` beside it, renamed when complete); `progress` is called with the
/// users written so far.
pub fn netflix(
    out: &Path,
    scale: f64,
    seed: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<Synthesised, String> {
    if !(scale.is_finite() && scale > 0.0 && scale <= 1.0) {
        return Err(format!("--scale must be in (0, 1] (got {scale})"));
    }
    let (users, items) = netflix_shape(scale);
    // Items' popularity: log-normal weights, cumulated for draws.
    let sigma_i = (2.0 * ITEM_SKEW.ln()).sqrt();
    let mut cumulative = Vec::with_capacity(items as usize);
    let mut total = 0.0;
    for i in 0..items {
        total += (sigma_i * normal(&[seed, 0x17E5, i])).exp();
        cumulative.push(total);
    }
    let sigma_u = (2.0 * (USER_MEAN / USER_MEDIAN).ln()).sqrt();
    let taste = |who: u64, id: u64| -> Vec<f64> {
        (0..TASTE_RANK)
            .map(|d| 0.45 * normal(&[seed, who, id, d]))
            .collect()
    };
    let item_taste: Vec<Vec<f64>> = (0..items).map(|i| taste(0x17E6, i)).collect();
    let item_bias: Vec<f64> = (0..items)
        .map(|i| 0.4 * normal(&[seed, 0x17E7, i]))
        .collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("user", DataType::Int64, false),
        Field::new("item", DataType::Int64, false),
        Field::new("rating", DataType::Float64, false),
    ]));
    let tmp = out.with_extension("parquet.tmp");
    let io = |e: std::io::Error| format!("cannot write {}: {e}", tmp.display());
    let pq = |e: parquet::errors::ParquetError| format!("cannot write {}: {e}", tmp.display());
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(vec![
            parquet::file::metadata::KeyValue::new(
                "dataset".into(),
                format!("forestall data synth netflix --scale {scale} --seed {seed}: {users} users x {items} items, Netflix-shaped"),
            ),
            // the ids the table may hold, rated or not (`mf` reads them)
            parquet::file::metadata::KeyValue::new("users".into(), users.to_string()),
            parquet::file::metadata::KeyValue::new("items".into(), items.to_string()),
        ]))
        .build();
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props)).map_err(pq)?;
    let (mut u_col, mut i_col, mut r_col) = (Vec::new(), Vec::new(), Vec::new());
    let mut ratings = 0u64;
    let flush = |u: &mut Vec<i64>, i: &mut Vec<i64>, r: &mut Vec<f64>, w: &mut ArrowWriter<_>| {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(std::mem::take(u))),
            Arc::new(Int64Array::from(std::mem::take(i))),
            Arc::new(Float64Array::from(std::mem::take(r))),
        ];
        let batch =
            RecordBatch::try_new(Arc::clone(&schema), columns).map_err(|e| e.to_string())?;
        w.write(&batch).map_err(pq)
    };
    let result = (|| {
        let mut chosen = std::collections::HashSet::new();
        for u in 0..users {
            let count = (USER_MEDIAN * (sigma_u * normal(&[seed, 0x05E2, u])).exp()).round();
            let count = (count as u64).clamp(1, items / 2);
            let p_u = taste(0x05E3, u);
            let b_u = 0.35 * normal(&[seed, 0x05E4, u]);
            let mut draw = KeyedRng::new(&[seed, 0x05E5, u]);
            chosen.clear();
            while (chosen.len() as u64) < count {
                let x = (draw.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
                let i = cumulative
                    .partition_point(|&c| c <= x)
                    .min(items as usize - 1);
                if !chosen.insert(i) {
                    continue;
                }
                let dot: f64 = p_u.iter().zip(&item_taste[i]).map(|(a, b)| a * b).sum();
                let noise = 0.6 * normal(&[seed, 0x05E6, u, i as u64]);
                let r = (3.6 + b_u + item_bias[i] + 1.5 * dot + noise)
                    .round()
                    .clamp(1.0, 5.0);
                u_col.push(u as i64 + 1);
                i_col.push(i as i64 + 1);
                r_col.push(r);
            }
            ratings += count;
            if u_col.len() >= BATCH_ROWS {
                flush(&mut u_col, &mut i_col, &mut r_col, &mut writer)?;
                progress(u + 1, users);
            }
        }
        if !u_col.is_empty() {
            flush(&mut u_col, &mut i_col, &mut r_col, &mut writer)?;
        }
        writer.close().map_err(pq)?;
        std::fs::rename(&tmp, out)
            .map_err(|e| format!("cannot rename {} into place: {e}", tmp.display()))
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    progress(users, users);
    Ok(Synthesised {
        users,
        items,
        ratings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{read_parquet_table, Column};

    #[test]
    fn a_small_scale_is_netflix_shaped_and_the_same_for_a_seed() {
        let dir = tempfile::tempdir().expect("dir");
        let out = dir.path().join("n.parquet");
        let s = netflix(&out, 0.004, 7, |_, _| {}).expect("written");
        assert_eq!((s.users, s.items), (1_921, 17_770));
        assert!(!dir.path().join("n.parquet.tmp").exists());
        let table = read_parquet_table(&out).expect("reads");
        assert_eq!(table.rows() as u64, s.ratings);
        let Some(Column::Number(users)) = table.column("user") else {
            panic!("user column")
        };
        let Some(Column::Number(ratings)) = table.column("rating") else {
            panic!("rating column")
        };
        // heavy-tailed per user: the mean well above the median
        let mut per_user = vec![0u64; 1_921];
        for u in users {
            per_user[u.expect("no nulls") as usize - 1] += 1;
        }
        per_user.sort_unstable();
        // Netflix: median ≈ 96, mean ≈ 209 ratings a user
        let median = per_user[960] as f64;
        let mean = s.ratings as f64 / 1_921.0;
        assert!((80.0..=115.0).contains(&median), "median {median}");
        assert!(mean > 1.6 * median, "mean {mean}, median {median}");
        assert!(per_user[0] >= 1 && *per_user.last().unwrap() > 10 * per_user[960]);
        assert!(ratings
            .iter()
            .all(|r| (1.0..=5.0).contains(&r.expect("no nulls"))));
        // the same seed, the same bytes of data
        let again = dir.path().join("m.parquet");
        netflix(&again, 0.004, 7, |_, _| {}).expect("written");
        assert_eq!(read_parquet_table(&again).expect("reads"), table);
        let other = dir.path().join("o.parquet");
        netflix(&other, 0.004, 8, |_, _| {}).expect("written");
        assert_ne!(read_parquet_table(&other).expect("reads"), table);
    }

    #[test]
    fn a_missing_synthetic_file_names_the_command_that_makes_it() {
        assert_eq!(
            synth_hint(Path::new("d/netflix-synth-0.01.parquet")).as_deref(),
            Some("forestall data synth netflix --scale 0.01 --out d/netflix-synth-0.01.parquet")
        );
        assert_eq!(synth_hint(Path::new("d/adult.parquet")), None);
    }

    #[test]
    fn a_scale_outside_the_range_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            let e = netflix(&dir.path().join("x.parquet"), bad, 1, |_, _| {}).unwrap_err();
            assert!(e.contains("--scale must be in (0, 1]"), "{e}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
