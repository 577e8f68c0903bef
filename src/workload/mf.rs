//! Matrix factorisation (`[model] kind = "mf"`): a rating is predicted as
//! `μ + b_u + b_i + p_u · q_i`, where μ is the training ratings' mean, `b_u`
//! and `b_i` the user's and the item's biases, and `p_u`, `q_i` their factor
//! rows of length `rank`. A unit is a block of ratings; its update touches
//! only its users' and items' rows, so it travels as sparse runs.
//!
//! The loss of one rating is `½(r̂ − r)² + ½λ(‖p_u‖² + ‖q_i‖² + b_u² + b_i²)`:
//! the penalty is charged once per rating a row takes part in (as per-rating
//! SGD charges it), inside the unit's gradient, so the optimiser's own
//! uniform penalty is off ([`Workload::penalised`] is false everywhere).
//!
//! Parameters, flat: the users' factor rows (users × rank), the items'
//! (items × rank), the users' biases, the items' biases.
//!
//! The data is a table of `user`, `item` and `rating` (what `forestall data
//! fetch movielens` writes; other columns are ignored). Ids are positive
//! integers; the users and items are numbered by id, 1 up to the largest.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Evaluation, ParamBlock, UnitGradient, Update, Workload};
use crate::data::{read_parquet_metadata, read_parquet_table, Column, DataConfig, DataError};
use crate::data::{Dataset, RowSource};
use crate::data::{SparseRows, Table};
use crate::rng;

/// The lowest and highest rating a table may hold.
pub const RATING_RANGE: (f64, f64) = (1.0, 5.0);

/// Salt of the factors' initial values.
const INIT_SALT: u64 = 0xFAC7_0125;

/// Matrix factorisation with biases over a ratings table.
#[derive(Debug, Clone)]
pub struct MatrixFactorisation {
    data: Dataset,
    users: usize,
    items: usize,
    rank: usize,
    l2: f64,
    /// Mean of the training ratings (μ).
    mean: f64,
    /// Test RMSE of μ + b_u + b_i with the biases fitted on the training
    /// ratings alone (the baseline a factor model must beat).
    baseline_rmse: f64,
}

impl MatrixFactorisation {
    /// Reads the ratings table `config` names and splits it as it says.
    pub fn load(config: &DataConfig, rank: u32, l2: f64) -> Result<Self, DataError> {
        let table = read_parquet_table(&config.path)?;
        let declared = Declared::read(&config.path)?;
        Self::from_table(&config.path, &table, declared, config, rank, l2)
    }

    /// The workload over a table already read (`path` is only for messages).
    pub fn from_table(
        path: &Path,
        table: &Table,
        declared: Declared,
        config: &DataConfig,
        rank: u32,
        l2: f64,
    ) -> Result<Self, DataError> {
        let Ratings {
            users,
            items,
            ratings,
        } = ratings(path, table, declared)?;
        let (train, test) = config.split(ratings.len());
        let unfit = |problem: String| DataError::Unfit {
            path: path.to_owned(),
            kind: "mf",
            problem,
        };
        if train.is_empty() || test.is_empty() {
            return Err(unfit(format!(
                "{} ratings leave no training or no evaluation rows after the split",
                ratings.len()
            )));
        }
        let most = |ids: &[u32], declared: Option<u32>| {
            declared.unwrap_or_else(|| ids.iter().max().copied().unwrap_or(0)) as usize
        };
        let (n_users, n_items) = (most(&users, declared.users), most(&items, declared.items));
        let mut rows = SparseRows {
            offsets: vec![0],
            indices: Vec::with_capacity(2 * ratings.len()),
            values: Vec::with_capacity(2 * ratings.len()),
        };
        for (&u, &i) in users.iter().zip(&items) {
            rows.indices.extend([u - 1, n_users as u32 + i - 1]);
            rows.values.extend([1.0, 1.0]);
            rows.offsets.push(rows.indices.len());
        }
        let feature_names = (1..=n_users)
            .map(|u| format!("user={u}"))
            .chain((1..=n_items).map(|i| format!("item={i}")))
            .collect();
        let data = Dataset {
            rows,
            labels: ratings,
            train,
            test,
            feature_names,
        };
        let mean = data
            .train
            .iter()
            .map(|&r| data.labels[r as usize])
            .sum::<f64>()
            / data.train.len() as f64;
        let mut mf = Self {
            data,
            users: n_users,
            items: n_items,
            rank: rank as usize,
            l2,
            mean,
            baseline_rmse: f64::NAN,
        };
        mf.baseline_rmse = mf.bias_baseline_rmse();
        Ok(mf)
    }

    /// Users, items and the factors' rank.
    pub fn shape(&self) -> (usize, usize, usize) {
        (self.users, self.items, self.rank)
    }

    /// Test RMSE of the user-plus-item-bias baseline fitted on the training
    /// ratings (Koren's regularised means: items first with λ = 25, then
    /// users on what is left with λ = 10).
    pub fn baseline_rmse(&self) -> f64 {
        self.baseline_rmse
    }

    fn bias_baseline_rmse(&self) -> f64 {
        let source = self.data.source();
        let (mut item_sum, mut item_n) = (vec![0.0; self.items], vec![0.0; self.items]);
        for &r in &self.data.train {
            let (_, i) = self.user_item(&source, r);
            item_sum[i] += source.label(r) - self.mean;
            item_n[i] += 1.0;
        }
        let b_i: Vec<f64> = item_sum
            .iter()
            .zip(&item_n)
            .map(|(s, n)| s / (25.0 + n))
            .collect();
        let (mut user_sum, mut user_n) = (vec![0.0; self.users], vec![0.0; self.users]);
        for &r in &self.data.train {
            let (u, i) = self.user_item(&source, r);
            user_sum[u] += source.label(r) - self.mean - b_i[i];
            user_n[u] += 1.0;
        }
        let b_u: Vec<f64> = user_sum
            .iter()
            .zip(&user_n)
            .map(|(s, n)| s / (10.0 + n))
            .collect();
        rmse(self.data.test.iter().map(|&r| {
            let (u, i) = self.user_item(&source, r);
            (self.clamp(self.mean + b_u[u] + b_i[i]), source.label(r))
        }))
    }

    /// The 0-based user and item of row `r`.
    fn user_item(&self, source: &dyn RowSource, r: u32) -> (usize, usize) {
        let (idx, _) = source.row(r);
        (idx[0] as usize, idx[1] as usize - self.users)
    }

    fn clamp(&self, x: f64) -> f64 {
        x.clamp(RATING_RANGE.0, RATING_RANGE.1)
    }

    /// Offsets of user `u`'s factors, item `i`'s, and their biases.
    fn layout(&self, u: usize, i: usize) -> (usize, usize, usize, usize) {
        let k = self.rank;
        let factors = (self.users + self.items) * k;
        (
            u * k,
            (self.users + i) * k,
            factors + u,
            factors + self.users + i,
        )
    }

    /// The model's rating of `(u, i)` at `params`, unclamped.
    fn predict(&self, params: &[f64], u: usize, i: usize) -> f64 {
        let (pu, qi, bu, bi) = self.layout(u, i);
        let k = self.rank;
        let dot: f64 = params[pu..pu + k]
            .iter()
            .zip(&params[qi..qi + k])
            .map(|(p, q)| p * q)
            .sum();
        self.mean + params[bu] + params[bi] + dot
    }
}

/// The root of the mean squared difference of (predicted, actual) pairs.
fn rmse(pairs: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for (p, y) in pairs {
        sum += (p - y) * (p - y);
        n += 1;
    }
    (sum / n.max(1) as f64).sqrt()
}

/// The users and items a ratings file declares in its metadata (`users`,
/// `items`: what `forestall data synth netflix` writes), if it does. Ids run
/// from 1 to the declared count, rated or not; without one, to the largest
/// id in the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Declared {
    /// Users.
    pub users: Option<u32>,
    /// Items.
    pub items: Option<u32>,
}

impl Declared {
    /// The counts `path`'s metadata declares; a count that is not a
    /// positive whole number is refused, naming its key.
    pub fn read(path: &Path) -> Result<Self, DataError> {
        let meta = read_parquet_metadata(path)?;
        let count = |key: &str| match meta.get(key) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) if n > 0 && n <= u32::MAX / 2 => Ok(Some(n)),
                _ => Err(DataError::Unfit {
                    path: path.to_owned(),
                    kind: "mf",
                    problem: format!("metadata '{key}' is '{v}', not a positive whole number"),
                }),
            },
        };
        Ok(Self {
            users: count("users")?,
            items: count("items")?,
        })
    }
}

/// The table's users, items (1-based ids) and ratings, checked: every value
/// present and finite, ids positive integers within the `declared` counts,
/// ratings in [`RATING_RANGE`], no (user, item) pair twice. A problem names
/// its column and row.
fn ratings(path: &Path, table: &Table, declared: Declared) -> Result<Ratings, DataError> {
    let unfit = |problem: String| DataError::Unfit {
        path: path.to_owned(),
        kind: "mf",
        problem,
    };
    let column = |name: &str| -> Result<&Vec<Option<f64>>, DataError> {
        match table.column(name) {
            Some(Column::Number(v)) => Ok(v),
            Some(Column::Text(_)) => Err(unfit(format!(
                "column '{name}' holds text; it must be numeric"
            ))),
            None => Err(unfit(format!(
                "no column '{name}' (columns: {}); a ratings table has user, item and rating",
                table.names.join(", ")
            ))),
        }
    };
    let bad = |column: &str, row: usize, what: &'static str| DataError::BadValue {
        path: path.to_owned(),
        column: column.to_owned(),
        row,
        what,
    };
    let value = |name: &str, row: usize, v: Option<f64>| match v {
        None => Err(bad(name, row, "null")),
        Some(x) if x.is_nan() => Err(bad(name, row, "NaN")),
        Some(x) if x.is_infinite() => Err(bad(name, row, "infinite")),
        Some(x) => Ok(x),
    };
    let id = |name: &str, row: usize, v: Option<f64>| {
        let x = value(name, row, v)?;
        if x >= 1.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX / 2) {
            Ok(x as u32)
        } else {
            Err(unfit(format!(
                "column '{name}' row {row} is {x}, not a positive integer id"
            )))
        }
    };
    let (user_col, item_col, rating_col) = (column("user")?, column("item")?, column("rating")?);
    if table.rows() == 0 {
        return Err(unfit("the table has no ratings".into()));
    }
    let mut users = Vec::with_capacity(table.rows());
    let mut items = Vec::with_capacity(table.rows());
    let mut ratings = Vec::with_capacity(table.rows());
    let mut seen: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for row in 0..table.rows() {
        let (u, i) = (
            id("user", row, user_col[row])?,
            id("item", row, item_col[row])?,
        );
        for (name, id, count) in [("user", u, declared.users), ("item", i, declared.items)] {
            if let Some(n) = count.filter(|&n| id > n) {
                return Err(unfit(format!(
                    "column '{name}' row {row} is {id}, beyond the {n} {name}s the file \
                     declares (metadata '{name}s')"
                )));
            }
        }
        let r = value("rating", row, rating_col[row])?;
        if !(RATING_RANGE.0..=RATING_RANGE.1).contains(&r) {
            return Err(unfit(format!(
                "column 'rating' row {row} is {r}, outside {}..={}",
                RATING_RANGE.0, RATING_RANGE.1
            )));
        }
        if let Some(first) = seen.insert((u, i), row) {
            return Err(unfit(format!(
                "user {u} rates item {i} twice (rows {first} and {row})"
            )));
        }
        users.push(u);
        items.push(i);
        ratings.push(r);
    }
    Ok(Ratings {
        users,
        items,
        ratings,
    })
}

/// A ratings table's columns, checked.
struct Ratings {
    /// 1-based user ids.
    users: Vec<u32>,
    /// 1-based item ids.
    items: Vec<u32>,
    /// The ratings.
    ratings: Vec<f64>,
}

impl Workload for MatrixFactorisation {
    fn kind(&self) -> &'static str {
        "mf"
    }

    fn data(&self) -> &Dataset {
        &self.data
    }

    fn param_count(&self) -> usize {
        (self.users + self.items) * (self.rank + 1)
    }

    fn param_blocks(&self) -> Vec<ParamBlock> {
        let (u, i, k) = (self.users, self.items, self.rank);
        let block = |name: &str, offset, shape: Vec<usize>| ParamBlock {
            name: name.into(),
            offset,
            len: shape.iter().product(),
            shape,
        };
        vec![
            block("user_factors", 0, vec![u, k]),
            block("item_factors", u * k, vec![i, k]),
            block("user_bias", (u + i) * k, vec![u]),
            block("item_bias", (u + i) * k + u, vec![i]),
        ]
    }

    /// Factors uniform in ±0.05 (keyed by seed and coordinate), biases 0.
    fn init_params(&self, seed: u64) -> Vec<f64> {
        let factors = (self.users + self.items) * self.rank;
        (0..self.param_count())
            .map(|j| match j < factors {
                true => (rng::uniform(&[seed, INIT_SALT, j as u64]) - 0.5) * 0.1,
                false => 0.0,
            })
            .collect()
    }

    fn penalised(&self, _coordinate: usize) -> bool {
        false
    }

    fn unit_gradient(&self, source: &dyn RowSource, params: &[f64], rows: &[u32]) -> UnitGradient {
        let k = self.rank;
        let mut contributions = Vec::with_capacity(rows.len() * (2 * k + 2));
        let mut loss_sum = 0.0;
        for &r in rows {
            let (u, i) = self.user_item(source, r);
            let (pu, qi, bu, bi) = self.layout(u, i);
            let e = self.predict(params, u, i) - source.label(r);
            let (p, q) = (&params[pu..pu + k], &params[qi..qi + k]);
            let norms: f64 = p.iter().chain(q).map(|x| x * x).sum::<f64>()
                + params[bu] * params[bu]
                + params[bi] * params[bi];
            loss_sum += 0.5 * e * e + 0.5 * self.l2 * norms;
            for d in 0..k {
                contributions.push(((pu + d) as u32, e * q[d] + self.l2 * p[d]));
                contributions.push(((qi + d) as u32, e * p[d] + self.l2 * q[d]));
            }
            contributions.push((bu as u32, e + self.l2 * params[bu]));
            contributions.push((bi as u32, e + self.l2 * params[bi]));
        }
        UnitGradient {
            grad: Update::from_contributions(contributions),
            loss_sum,
        }
    }

    /// RMSE of the clamped predictions (`rmse`, with the bias baseline's as
    /// `bias_baseline_rmse`); the loss is the mean of ½(r̂ − r)² unclamped;
    /// the accuracy is the share of ratings the rounded prediction hits.
    fn evaluate(&self, params: &[f64]) -> Evaluation {
        let source = self.data.source();
        let (mut half_sq, mut hits, mut sq) = (0.0, 0usize, 0.0);
        for &r in &self.data.test {
            let (u, i) = self.user_item(&source, r);
            let raw = self.predict(params, u, i);
            let y = source.label(r);
            half_sq += 0.5 * (raw - y) * (raw - y);
            let p = self.clamp(raw);
            sq += (p - y) * (p - y);
            hits += usize::from(p.round() == y);
        }
        let n = self.data.test.len().max(1) as f64;
        let mut e = Evaluation::new(half_sq / n, hits as f64 / n);
        e.metrics.insert("rmse".into(), (sq / n).sqrt());
        e.metrics
            .insert("bias_baseline_rmse".into(), self.baseline_rmse);
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ratings of 3 users × 4 items, every pair but (3, 4).
    fn table(extra: &[(f64, f64, f64)]) -> Table {
        let mut cells: Vec<(f64, f64, f64)> = (1..=3)
            .flat_map(|u| (1..=4).map(move |i| (u as f64, i as f64, ((u * i) % 5 + 1) as f64)))
            .filter(|&(u, i, _)| (u, i) != (3.0, 4.0))
            .collect();
        cells.extend_from_slice(extra);
        let col = |f: fn(&(f64, f64, f64)) -> f64| {
            Column::Number(cells.iter().map(|c| Some(f(c))).collect())
        };
        Table {
            names: vec!["user".into(), "item".into(), "rating".into()],
            columns: vec![col(|c| c.0), col(|c| c.1), col(|c| c.2)],
        }
    }

    fn config() -> DataConfig {
        DataConfig {
            path: "ratings.parquet".into(),
            label: String::new(),
            positive: String::new(),
            drop: Vec::new(),
            test_fraction: 0.25,
            checksums: None,
            split_seed: Some(3),
            validation_fraction: None,
        }
    }

    fn mf(rank: u32, l2: f64) -> MatrixFactorisation {
        let (path, declared) = (Path::new("r.parquet"), Declared::default());
        MatrixFactorisation::from_table(path, &table(&[]), declared, &config(), rank, l2)
            .expect("fits")
    }

    #[test]
    fn the_gradient_is_sparse_and_matches_finite_differences() {
        let w = mf(2, 0.1);
        let params = w.init_params(7);
        let source = w.data().source();
        let rows = &w.data().train[..4];
        let g = w.unit_gradient(&source, &params, rows);
        let Update::Sparse { idx, .. } = &g.grad else {
            panic!("a block of ratings gives sparse runs")
        };
        assert!(idx.len() < w.param_count() && idx.windows(2).all(|p| p[0] < p[1]));
        let loss = |p: &[f64]| w.unit_gradient(&source, p, rows).loss_sum;
        for j in 0..w.param_count() {
            let mut hi = params.clone();
            let mut lo = params.clone();
            hi[j] += 1e-6;
            lo[j] -= 1e-6;
            let fd = (loss(&hi) - loss(&lo)) / 2e-6;
            assert!((fd - g.grad[j]).abs() < 1e-6, "{j}: {fd} vs {}", g.grad[j]);
        }
    }

    #[test]
    fn a_unit_split_in_two_sums_to_the_whole() {
        let w = mf(3, 0.05);
        let params = w.init_params(1);
        let source = w.data().source();
        let rows = &w.data().train;
        let whole = w.unit_gradient(&source, &params, rows);
        let mut parts = w.unit_gradient(&source, &params, &rows[..5]).grad;
        parts.add(
            &w.unit_gradient(&source, &params, &rows[5..]).grad,
            w.param_count(),
        );
        for j in 0..w.param_count() {
            assert!((whole.grad[j] - parts[j]).abs() < 1e-12);
        }
    }

    #[test]
    fn the_layout_names_four_blocks_and_the_baseline_is_finite() {
        let w = mf(2, 0.0);
        assert_eq!(w.shape(), (3, 4, 2));
        assert_eq!(w.param_count(), 7 * 3);
        let blocks = w.param_blocks();
        assert_eq!(
            blocks.last().map(|b| b.offset + b.len),
            Some(w.param_count())
        );
        assert!(w.baseline_rmse().is_finite());
        let e = w.evaluate(&w.init_params(0));
        assert!(e.metrics["rmse"] > 0.0 && (0.0..=1.0).contains(&e.accuracy));
        // init: factors small, biases zero
        let init = w.init_params(5);
        assert!(init[..14].iter().all(|x| x.abs() <= 0.05) && init[14..].iter().all(|&x| x == 0.0));
    }

    #[test]
    fn bad_ratings_are_named_by_column_and_row() {
        let err = |extra: &[(f64, f64, f64)]| {
            MatrixFactorisation::from_table(
                Path::new("r.parquet"),
                &table(extra),
                Declared::default(),
                &config(),
                2,
                0.0,
            )
            .expect_err("refused")
            .to_string()
        };
        assert!(err(&[(3.0, 4.0, 6.0)]).contains("column 'rating' row 11 is 6"));
        assert!(err(&[(3.0, 4.0, 0.5)]).contains("outside 1..=5"));
        assert!(err(&[(0.0, 4.0, 3.0)]).contains("column 'user' row 11 is 0"));
        assert!(err(&[(2.5, 4.0, 3.0)]).contains("not a positive integer id"));
        assert!(err(&[(1.0, 2.0, 3.0)]).contains("user 1 rates item 2 twice (rows 1 and 11)"));
        assert!(err(&[(3.0, 4.0, f64::NAN)]).contains("row 11 is NaN"));
        let mut t = table(&[]);
        t.names[2] = "stars".into();
        let path = Path::new("r.parquet");
        let e = MatrixFactorisation::from_table(path, &t, Declared::default(), &config(), 2, 0.0)
            .expect_err("no rating column")
            .to_string();
        assert!(e.contains("no column 'rating'"), "{e}");
        let declared = Declared {
            users: Some(2),
            items: None,
        };
        let e = MatrixFactorisation::from_table(path, &table(&[]), declared, &config(), 2, 0.0)
            .map(|m| m.shape())
            .expect_err("a user beyond the declared count")
            .to_string();
        assert!(
            e.contains("column 'user' row")
                && e.contains("is 3, beyond the 2 users the file declares"),
            "{e}"
        );
        let declared = Declared {
            users: Some(40),
            items: Some(50),
        };
        let m = MatrixFactorisation::from_table(path, &table(&[]), declared, &config(), 2, 0.0)
            .expect("within the declared counts");
        assert_eq!(m.shape(), (40, 50, 2), "unrated users and items get rows");
    }
}
