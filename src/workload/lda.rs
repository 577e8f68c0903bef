//! Latent Dirichlet allocation by collapsed Gibbs sampling (`[model] kind =
//! "lda"`), distributed as AD-LDA (Newman et al.): every unit sweeps its
//! documents against the topic–word counts of the iteration's start (plus its
//! own changes so far) and returns count deltas, which the shard owners add
//! in fixed partition order.
//!
//! Parameters, flat, all whole numbers held in `f64` (exact below 2⁵³):
//! - the topic–word counts `n[k·V + w]`, K × V;
//! - the topic totals `n[k]`, K;
//! - every token's topic `z[t]`, one per token of the corpus, tokens
//!   numbered document by document, and within a document word by word in
//!   the row's order, a word's `count` tokens in a row.
//!
//! That is under policies with BSP semantics ([`LdaUpdates::Deltas`]). Under
//! a policy that reads stale parameters or drops units, deltas relative to
//! the topics a unit read would corrupt the counts once added to a version
//! the unit did not read; there the parameters hold the topics alone, a unit
//! writes its tokens' topics ([`OptimizerKind::Set`](super::OptimizerKind::Set))
//! and the counts are recounted from the topics wherever they are read
//! ([`LdaUpdates::Topics`]). The counts can then never disagree with the
//! topics; what staleness costs is the sampler's (stale counts, and a sweep
//! that starts from topics older than its document's last sweep).
//!
//! A token's topic is the state of the unit that holds its document, and it
//! lives in the parameters: a unit computed by a peer (reassigned, cloned)
//! reads it from the version every worker holds, its update carries the
//! changed topics as deltas, and checkpoints keep it with the counts.
//!
//! Every draw comes from a generator keyed by (seed, iteration, document,
//! position), and a unit's deltas are integers, so the counts are
//! bit-identical for every worker count and BSP-semantics policy. A unit is
//! swept whole: micro-batches are refused for LDA (a hand-over mid-unit must
//! not split a document's sweep).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use super::{written, Draws, Evaluation, ParamBlock, UnitGradient, Update, Workload};
use crate::data::{read_parquet_metadata, read_parquet_table, Column, DataConfig, DataError};
use crate::data::{Dataset, RowSource, SparseRows, Table};
use crate::rng;

/// Salt of the initial topics' draws.
const INIT_SALT: u64 = 0x1DA0_0001;
/// Salt of the sweeps' draws.
const SWEEP_SALT: u64 = 0x1DA0_0002;
/// Top words listed per topic in the summary.
pub const TOP_WORDS: usize = 8;

/// LDA's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LdaConfig {
    /// Topics K.
    pub topics: u32,
    /// Symmetric Dirichlet prior of a document's topics.
    pub alpha: f64,
    /// Symmetric Dirichlet prior of a topic's words.
    pub beta: f64,
    /// What a unit sends its shard owners.
    pub updates: LdaUpdates,
}

/// What an LDA unit sends its shard owners, and so what the parameters hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LdaUpdates {
    /// AD-LDA: the parameters hold the counts and the topics; a unit sends
    /// the deltas of the tokens it moved, which the owners add. Needs BSP
    /// semantics (every unit reads the version its deltas are added to).
    #[default]
    Deltas,
    /// The parameters hold the topics alone; a unit writes its tokens'
    /// topics, and the counts are recounted from the topics. For policies
    /// that read stale parameters or drop units.
    Topics,
}

impl LdaUpdates {
    /// Whether this is the default (left out of a plan's JSON and hash).
    pub fn is_deltas(&self) -> bool {
        *self == Self::Deltas
    }
}

/// LDA over a corpus of word counts.
#[derive(Debug, Clone)]
pub struct Lda {
    data: Dataset,
    config: LdaConfig,
    vocabulary: Vec<String>,
    /// First token of each document, and the corpus's token count last.
    offsets: Vec<usize>,
    /// Every token's word, in token order (to recount under
    /// [`LdaUpdates::Topics`]).
    token_words: Vec<u32>,
}

impl Lda {
    /// Reads the corpus `config` names: a table of `doc`, `word`, `count`
    /// with the vocabulary, one word a line, in its `vocabulary` metadata
    /// (what `forestall data fetch reuters` writes).
    pub fn load(data: &DataConfig, config: LdaConfig) -> Result<Self, DataError> {
        let table = read_parquet_table(&data.path)?;
        let meta = read_parquet_metadata(&data.path)?;
        let vocabulary: Vec<String> = meta
            .get("vocabulary")
            .ok_or_else(|| DataError::Unfit {
                path: data.path.clone(),
                kind: "lda",
                problem: "the file has no 'vocabulary' metadata (one word a line); \
                          `forestall data fetch reuters` writes one"
                    .into(),
            })?
            .lines()
            .map(str::to_owned)
            .collect();
        Self::from_table(&data.path, &table, vocabulary, config)
    }

    /// The workload over a table already read (`path` is only for messages).
    pub fn from_table(
        path: &Path,
        table: &Table,
        vocabulary: Vec<String>,
        config: LdaConfig,
    ) -> Result<Self, DataError> {
        let rows = corpus_rows(path, table, vocabulary.len())?;
        let docs = rows.rows();
        let mut offsets = Vec::with_capacity(docs + 1);
        offsets.push(0);
        for d in 0..docs {
            let n: f64 = rows.row(d).1.iter().sum();
            offsets.push(offsets[d] + n as usize);
        }
        let all: Vec<u32> = (0..docs as u32).collect();
        let data = Dataset {
            rows,
            labels: vec![0.0; docs],
            // Gibbs sampling fits the corpus itself: the evaluation is the
            // joint likelihood of every document.
            train: all.clone(),
            test: all,
            feature_names: vocabulary.clone(),
        };
        let token_words: Vec<u32> = (0..docs as u32)
            .flat_map(|d| Self::doc_words(&data.source(), d))
            .collect();
        Ok(Self {
            data,
            config,
            vocabulary,
            offsets,
            token_words,
        })
    }

    /// Documents, vocabulary size and tokens.
    pub fn shape(&self) -> (usize, usize, usize) {
        (self.offsets.len() - 1, self.vocabulary.len(), self.tokens())
    }

    fn tokens(&self) -> usize {
        *self.offsets.last().unwrap_or(&0)
    }

    fn k(&self) -> usize {
        self.config.topics as usize
    }

    fn v(&self) -> usize {
        self.vocabulary.len()
    }

    /// Offset of the topic totals, and of the tokens' topics.
    fn totals_at(&self) -> usize {
        self.k() * self.v()
    }

    /// Offset of the tokens' topics in the parameters.
    fn topics_at(&self) -> usize {
        match self.config.updates {
            LdaUpdates::Deltas => self.totals_at() + self.k(),
            LdaUpdates::Topics => 0,
        }
    }

    /// The topic–word counts and then the topic totals at `params`: a part
    /// of them, or recounted from the topics ([`LdaUpdates::Topics`]).
    fn tables<'a>(&self, params: &'a [f64]) -> Cow<'a, [f64]> {
        let (k, v) = (self.k(), self.v());
        match self.config.updates {
            LdaUpdates::Deltas => Cow::Borrowed(&params[..k * v + k]),
            LdaUpdates::Topics => {
                let mut n = vec![0.0; k * v + k];
                let z = &params[self.topics_at()..];
                for (&topic, &w) in z.iter().zip(&self.token_words) {
                    n[topic as usize * v + w as usize] += 1.0;
                    n[k * v + topic as usize] += 1.0;
                }
                Cow::Owned(n)
            }
        }
    }

    /// Document `d`'s words, one per token, in token order.
    fn doc_words(source: &dyn RowSource, d: u32) -> Vec<u32> {
        let (idx, val) = source.row(d);
        idx.iter()
            .zip(val)
            .flat_map(|(&w, &n)| std::iter::repeat_n(w, n as usize))
            .collect()
    }

    /// The topic counts of document `d` under the topics `z` of its tokens.
    fn doc_topics(&self, z: &[f64]) -> Vec<f64> {
        let mut n = vec![0.0; self.k()];
        for &k in z {
            n[k as usize] += 1.0;
        }
        n
    }

    /// The joint log-likelihood log p(w, z) of the corpus at `params`, as
    /// the `lda` package's `loglikelihood()` computes it.
    pub fn log_likelihood(&self, params: &[f64]) -> f64 {
        let (k, v) = (self.k(), self.v());
        let LdaConfig { alpha, beta, .. } = self.config;
        let (lg_beta, lg_alpha) = (ln_gamma(beta), ln_gamma(alpha));
        let mut ll = k as f64 * ln_gamma(beta * v as f64);
        let tables = self.tables(params);
        for topic in 0..k {
            ll -= ln_gamma(beta * v as f64 + tables[self.totals_at() + topic]);
            for &n in &tables[topic * v..(topic + 1) * v] {
                if n > 0.0 {
                    ll += ln_gamma(beta + n) - lg_beta;
                }
            }
        }
        let z = &params[self.topics_at()..];
        for d in 0..self.offsets.len() - 1 {
            let (from, to) = (self.offsets[d], self.offsets[d + 1]);
            ll += ln_gamma(alpha * k as f64) - ln_gamma(alpha * k as f64 + (to - from) as f64);
            for n in self.doc_topics(&z[from..to]) {
                if n > 0.0 {
                    ll += ln_gamma(alpha + n) - lg_alpha;
                }
            }
        }
        ll
    }

    /// Each topic's most frequent words at `params`, most frequent first
    /// (ties: the lower word id).
    pub fn top_words(&self, params: &[f64], count: usize) -> Vec<Vec<&str>> {
        let v = self.v();
        let tables = self.tables(params);
        (0..self.k())
            .map(|topic| {
                let row = &tables[topic * v..(topic + 1) * v];
                let mut words: Vec<usize> = (0..v).collect();
                words.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                words
                    .into_iter()
                    .take(count)
                    .map(|w| self.vocabulary[w].as_str())
                    .collect()
            })
            .collect()
    }
}

/// The corpus's documents as sparse rows (word ids and counts), checked:
/// documents numbered 0..D with none empty, word ids within the vocabulary,
/// counts whole and at least 1, no word twice in a document.
fn corpus_rows(path: &Path, table: &Table, vocabulary: usize) -> Result<SparseRows, DataError> {
    let unfit = |problem: String| DataError::Unfit {
        path: path.to_owned(),
        kind: "lda",
        problem,
    };
    let column = |name: &str| -> Result<&Vec<Option<f64>>, DataError> {
        match table.column(name) {
            Some(Column::Number(v)) => Ok(v),
            _ => Err(unfit(format!(
                "no numeric column '{name}' (columns: {}); a corpus has doc, word and count",
                table.names.join(", ")
            ))),
        }
    };
    let (docs, words, counts) = (column("doc")?, column("word")?, column("count")?);
    if vocabulary == 0 {
        return Err(unfit("the vocabulary is empty".into()));
    }
    let whole = |name: &str, row: usize, v: Option<f64>, min: f64, max: f64| match v {
        Some(x) if x.fract() == 0.0 && x >= min && x < max => Ok(x),
        Some(x) => Err(unfit(format!(
            "column '{name}' row {row} is {x}, not a whole number in {min}..{max}"
        ))),
        None => Err(unfit(format!("column '{name}' row {row} is null"))),
    };
    let mut entries: Vec<(u32, u32, f64, usize)> = Vec::with_capacity(table.rows());
    for row in 0..table.rows() {
        let d = whole("doc", row, docs[row], 0.0, f64::from(u32::MAX))?;
        let w = whole("word", row, words[row], 0.0, vocabulary as f64)?;
        let n = whole("count", row, counts[row], 1.0, 1e9)?;
        entries.push((d as u32, w as u32, n, row));
    }
    entries.sort_by_key(|e| (e.0, e.1));
    let mut rows = SparseRows {
        offsets: vec![0],
        indices: Vec::with_capacity(entries.len()),
        values: Vec::with_capacity(entries.len()),
    };
    for pair in entries.windows(2) {
        if (pair[0].0, pair[0].1) == (pair[1].0, pair[1].1) {
            return Err(unfit(format!(
                "document {} lists word {} twice (rows {} and {})",
                pair[0].0, pair[0].1, pair[0].3, pair[1].3
            )));
        }
    }
    let Some(last) = entries.last().map(|e| e.0) else {
        return Err(unfit("the corpus has no documents".into()));
    };
    let mut next = entries.iter().peekable();
    for d in 0..=last {
        let before = rows.indices.len();
        while let Some((_, w, n, _)) = next.next_if(|e| e.0 == d) {
            rows.indices.push(*w);
            rows.values.push(*n);
        }
        if rows.indices.len() == before {
            return Err(unfit(format!("document {d} has no words")));
        }
        rows.offsets.push(rows.indices.len());
    }
    Ok(rows)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9: about 15 significant digits).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // reflection: Γ(x) Γ(1 − x) = π / sin(πx)
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, &c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

impl Workload for Lda {
    fn kind(&self) -> &'static str {
        "lda"
    }

    fn data(&self) -> &Dataset {
        &self.data
    }

    fn param_count(&self) -> usize {
        self.topics_at() + self.tokens()
    }

    fn param_blocks(&self) -> Vec<ParamBlock> {
        let (k, v) = (self.k(), self.v());
        let topics = ParamBlock {
            name: "token_topics".into(),
            offset: self.topics_at(),
            len: self.tokens(),
            shape: vec![self.tokens()],
        };
        match self.config.updates {
            LdaUpdates::Topics => vec![topics],
            LdaUpdates::Deltas => vec![
                ParamBlock {
                    name: "topic_word_counts".into(),
                    offset: 0,
                    len: k * v,
                    shape: vec![k, v],
                },
                ParamBlock {
                    name: "topic_counts".into(),
                    offset: k * v,
                    len: k,
                    shape: vec![k],
                },
                topics,
            ],
        }
    }

    /// Every token's topic drawn uniformly, keyed by (seed, document,
    /// position), and the counts they make (under [`LdaUpdates::Deltas`]).
    fn init_params(&self, seed: u64) -> Vec<f64> {
        let (k, v) = (self.k(), self.v());
        let mut params = vec![0.0; self.param_count()];
        let source = self.data.source();
        for d in 0..self.offsets.len() - 1 {
            for (pos, w) in Self::doc_words(&source, d as u32).into_iter().enumerate() {
                let mut draw = rng::KeyedRng::new(&[seed, INIT_SALT, d as u64, pos as u64]);
                let topic = draw.below(k as u64) as usize;
                if self.config.updates == LdaUpdates::Deltas {
                    params[topic * v + w as usize] += 1.0;
                    params[self.totals_at() + topic] += 1.0;
                }
                params[self.topics_at() + self.offsets[d] + pos] = topic as f64;
            }
        }
        params
    }

    fn penalised(&self, _coordinate: usize) -> bool {
        false
    }

    /// Sweeps with draws keyed by seed 0 and iteration 0; the runtime calls
    /// [`Workload::unit_update`] with the job's.
    fn unit_gradient(&self, source: &dyn RowSource, params: &[f64], rows: &[u32]) -> UnitGradient {
        self.unit_update(Draws::default(), source, params, rows)
    }

    /// One Gibbs sweep over the unit's documents, in row order and within a
    /// document in token order: each token's topic is drawn from
    /// p(k) ∝ (n_dk + α)(n_kw + β)/(n_k + Vβ), its own count left out, at the
    /// iteration's counts plus the unit's own changes so far (AD-LDA). The
    /// loss is −Σ log p(w | d) of its tokens at the iteration's counts.
    fn unit_update(
        &self,
        draws: Draws,
        source: &dyn RowSource,
        params: &[f64],
        rows: &[u32],
    ) -> UnitGradient {
        let (k, v) = (self.k(), self.v());
        let LdaConfig { alpha, beta, .. } = self.config;
        let vb = v as f64 * beta;
        let totals_at = self.totals_at();
        let tables = self.tables(params);
        let mut totals = tables[totals_at..totals_at + k].to_vec();
        let deltas = self.config.updates == LdaUpdates::Deltas;
        // the unit's own changes to the topic–word counts
        let mut changed: HashMap<usize, f64> = HashMap::new();
        let mut contributions = Vec::new();
        let mut loss_sum = 0.0;
        let mut weights = vec![0.0; k];
        for &d in rows {
            let words = Self::doc_words(source, d);
            let first = self.offsets[d as usize];
            let mut z: Vec<f64> = params[self.topics_at() + first..][..words.len()].to_vec();
            let mut n_d = self.doc_topics(&z);
            let norm = words.len() as f64 + k as f64 * alpha;
            for &w in &words {
                let p: f64 = (0..k)
                    .map(|t| {
                        (n_d[t] + alpha) / norm * (tables[t * v + w as usize] + beta)
                            / (tables[totals_at + t] + vb)
                    })
                    .sum();
                loss_sum -= p.ln();
            }
            for (pos, &w) in words.iter().enumerate() {
                let old = z[pos] as usize;
                let count = |t: usize, changed: &HashMap<usize, f64>| {
                    let i = t * v + w as usize;
                    tables[i] + changed.get(&i).copied().unwrap_or(0.0)
                };
                n_d[old] -= 1.0;
                totals[old] -= 1.0;
                *changed.entry(old * v + w as usize).or_default() -= 1.0;
                let mut total = 0.0;
                for (t, weight) in weights.iter_mut().enumerate() {
                    total += (n_d[t] + alpha) * (count(t, &changed) + beta) / (totals[t] + vb);
                    *weight = total;
                }
                let u = rng::uniform(&[
                    draws.seed,
                    SWEEP_SALT,
                    draws.iteration,
                    u64::from(d),
                    pos as u64,
                ]) * total;
                let new = weights.iter().position(|&c| u < c).unwrap_or(k - 1);
                n_d[new] += 1.0;
                totals[new] += 1.0;
                *changed.entry(new * v + w as usize).or_default() += 1.0;
                let t = self.topics_at() + first + pos;
                if !deltas {
                    // Every token swept is written: its topic in the version
                    // the owners hold may differ from the one read here.
                    contributions.push((t as u32, written(new as f64)));
                } else if new != old {
                    contributions.push(((old * v + w as usize) as u32, -1.0));
                    contributions.push(((new * v + w as usize) as u32, 1.0));
                    contributions.push(((totals_at + old) as u32, -1.0));
                    contributions.push(((totals_at + new) as u32, 1.0));
                    contributions.push((t as u32, new as f64 - old as f64));
                }
                z[pos] = new as f64;
            }
        }
        UnitGradient {
            grad: Update::from_contributions(contributions),
            loss_sum,
        }
    }

    /// The joint log-likelihood log p(w, z) per token (`loglik_per_token`,
    /// and its total as `loglik`); the loss is its negative, the accuracy 0
    /// (LDA has no labels).
    fn evaluate(&self, params: &[f64]) -> Evaluation {
        let ll = self.log_likelihood(params);
        let per_token = ll / self.tokens().max(1) as f64;
        let mut e = Evaluation::new(-per_token, 0.0);
        e.metrics.insert("loglik".into(), ll);
        e.metrics.insert("loglik_per_token".into(), per_token);
        e
    }

    fn describe(&self, params: &[f64]) -> Vec<String> {
        self.top_words(params, TOP_WORDS)
            .into_iter()
            .enumerate()
            .map(|(t, words)| format!("topic {t:>2}: {}", words.join(" ")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Optimizer, OptimizerConfig, OptimizerKind};

    /// Documents of two kinds: words 0–4 in even documents, 5–9 in odd.
    fn corpus(docs: u32) -> Table {
        let mut cells = Vec::new();
        for d in 0..docs {
            for w in 0..5 {
                let word = if d % 2 == 0 { w } else { w + 5 };
                cells.push((d, word, 1 + (d + w) % 3));
            }
        }
        table(&cells)
    }

    fn table(cells: &[(u32, u32, u32)]) -> Table {
        let col = |f: fn(&(u32, u32, u32)) -> u32| {
            Column::Number(cells.iter().map(|c| Some(f(c) as f64)).collect())
        };
        Table {
            names: vec!["doc".into(), "word".into(), "count".into()],
            columns: vec![col(|c| c.0), col(|c| c.1), col(|c| c.2)],
        }
    }

    fn vocabulary(n: usize) -> Vec<String> {
        (0..n).map(|w| format!("w{w}")).collect()
    }

    fn lda(topics: u32) -> Lda {
        let config = LdaConfig {
            topics,
            alpha: 0.1,
            beta: 0.01,
            updates: LdaUpdates::Deltas,
        };
        Lda::from_table(Path::new("c.parquet"), &corpus(12), vocabulary(10), config).expect("fits")
    }

    /// The counts the topics of the tokens make.
    fn recount(m: &Lda, params: &[f64]) -> Vec<f64> {
        let (k, v) = (m.k(), m.v());
        let mut counts = vec![0.0; k * v + k];
        let source = m.data().source();
        for d in 0..12u32 {
            for (pos, w) in Lda::doc_words(&source, d).into_iter().enumerate() {
                let t = params[m.topics_at() + m.offsets[d as usize] + pos] as usize;
                counts[t * v + w as usize] += 1.0;
                counts[k * v + t] += 1.0;
            }
        }
        counts
    }

    #[test]
    fn ln_gamma_matches_known_values() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-10 * b.abs().max(1.0);
        assert!(close(ln_gamma(1.0), 0.0) && close(ln_gamma(2.0), 0.0));
        assert!(close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln()));
        assert!(close(ln_gamma(10.0), 362_880f64.ln()));
        assert!(close(ln_gamma(0.01), 4.599_479_878_042_022));
        assert!(close(ln_gamma(1e4), 82_099.717_496_442_38));
    }

    #[test]
    fn sweeps_keep_the_counts_those_of_the_topics_and_learn_the_two_kinds() {
        let m = lda(2);
        let (docs, v, tokens) = m.shape();
        assert_eq!((docs, v), (12, 10));
        let mut params = m.init_params(3);
        assert_eq!(params[..m.topics_at()], recount(&m, &params)[..]);
        let mut add = Optimizer::new(
            OptimizerConfig {
                kind: OptimizerKind::Add,
                learning_rate: 1.0,
                beta1: 0.9,
                beta2: 0.999,
                epsilon: 1e-8,
                l2: 0.0,
            },
            vec![false; m.param_count()],
        );
        let source = m.data().source();
        let start = m.log_likelihood(&params);
        for iteration in 0..20 {
            let draws = Draws { seed: 3, iteration };
            // two units, as two workers would sweep them
            let mut total = vec![0.0; m.param_count()];
            for unit in [(0..6).collect::<Vec<u32>>(), (6..12).collect()] {
                m.unit_update(draws, &source, &params, &unit)
                    .grad
                    .add_into(&mut total);
            }
            add.step(&mut params, &total, 12.0);
            assert_eq!(
                params[..m.topics_at()],
                recount(&m, &params)[..],
                "sweep {iteration}"
            );
        }
        let totals: f64 = params[m.totals_at()..m.topics_at()].iter().sum();
        assert_eq!(totals as usize, tokens);
        assert!(
            m.log_likelihood(&params) > start,
            "the sweeps fit the corpus better"
        );
        // the two kinds of documents end in two topics
        let top = m.top_words(&params, 5);
        let kind = |words: &[&str]| words.iter().all(|w| w[1..].parse::<u32>().unwrap() < 5);
        assert_ne!(kind(&top[0]), kind(&top[1]), "{top:?}");
        assert_eq!(m.describe(&params).len(), 2);
    }

    /// The update of the two units of 6 documents each, as two workers
    /// would sweep them at `read`, stepped onto `params`.
    fn sweep(m: &Lda, read: &[f64], params: &mut [f64], iteration: u64) {
        let kind = match m.config.updates {
            LdaUpdates::Deltas => OptimizerKind::Add,
            LdaUpdates::Topics => OptimizerKind::Set,
        };
        let config = OptimizerConfig {
            kind,
            learning_rate: 1.0,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            l2: 0.0,
        };
        let source = m.data().source();
        let mut total = vec![0.0; m.param_count()];
        for unit in [(0..6).collect::<Vec<u32>>(), (6..12).collect()] {
            let draws = Draws { seed: 3, iteration };
            m.unit_update(draws, &source, read, &unit)
                .grad
                .add_into(&mut total);
        }
        let mut step = Optimizer::new(config, vec![false; m.param_count()]);
        step.step(params, &total, 12.0);
    }

    fn writing(m: &Lda) -> Lda {
        let config = LdaConfig {
            updates: LdaUpdates::Topics,
            ..m.config
        };
        Lda {
            config,
            ..m.clone()
        }
    }

    /// Units that write their tokens' topics, with the counts recounted,
    /// draw the same chain as units that send deltas, topic for topic.
    #[test]
    fn writing_the_topics_draws_the_chain_of_adding_the_deltas() {
        let deltas = lda(3);
        let topics = writing(&deltas);
        let mut a = deltas.init_params(3);
        let mut b = topics.init_params(3);
        assert_eq!(b.len(), deltas.tokens(), "the topics alone");
        assert_eq!(a[deltas.topics_at()..], b[..]);
        for iteration in 0..10 {
            sweep(&deltas, &a.clone(), &mut a, iteration);
            sweep(&topics, &b.clone(), &mut b, iteration);
            assert_eq!(a[deltas.topics_at()..], b[..], "sweep {iteration}");
            assert_eq!(deltas.tables(&a), topics.tables(&b), "sweep {iteration}");
        }
        assert_eq!(deltas.log_likelihood(&a), topics.log_likelihood(&b));
        assert_eq!(deltas.top_words(&a, 4), topics.top_words(&b, 4));
        assert_eq!(topics.param_blocks().len(), 1);
    }

    /// A sweep that read a version one sweep old: its deltas, added to the
    /// newer version, leave counts that are not those of any topics (and
    /// topics outside 0..K); its written topics leave whole topics and the
    /// counts they make.
    #[test]
    fn a_stale_sweep_corrupts_added_deltas_but_not_written_topics() {
        let deltas = lda(3);
        let topics = writing(&deltas);
        let (mut a, mut b) = (deltas.init_params(5), topics.init_params(5));
        let (old_a, old_b) = (a.clone(), b.clone());
        sweep(&deltas, &old_a, &mut a, 0);
        sweep(&topics, &old_b, &mut b, 0);
        // the second sweep reads the version before the first
        sweep(&deltas, &old_a, &mut a, 1);
        sweep(&topics, &old_b, &mut b, 1);
        let z = &a[deltas.topics_at()..];
        let whole = |z: &[f64]| {
            z.iter()
                .all(|&t| t.fract() == 0.0 && (0.0..3.0).contains(&t))
        };
        assert!(
            !whole(z) || a[..deltas.topics_at()] != recount(&deltas, &a)[..],
            "the deltas corrupt"
        );
        assert!(whole(&b), "written topics stay topics");
    }

    #[test]
    fn the_same_draws_give_the_same_sweep_and_others_another() {
        let m = lda(3);
        let params = m.init_params(1);
        let source = m.data().source();
        let rows: Vec<u32> = (0..12).collect();
        let at =
            |seed, iteration| m.unit_update(Draws { seed, iteration }, &source, &params, &rows);
        assert_eq!(at(1, 4), at(1, 4));
        assert_ne!(at(1, 4).grad, at(1, 5).grad);
        assert_ne!(at(1, 4).grad, at(2, 4).grad);
    }

    #[test]
    fn one_topic_has_the_likelihood_of_its_words_alone() {
        // K = 1: every document's topic part cancels, leaving
        // ln Γ(Vβ) − ln Γ(Vβ + N) + Σ_w [ln Γ(β + n_w) − ln Γ(β)]
        let m = lda(1);
        let params = m.init_params(0);
        let (_, v, n) = m.shape();
        let beta = 0.01;
        let mut expected = ln_gamma(beta * v as f64) - ln_gamma(beta * v as f64 + n as f64);
        for &count in &params[..v] {
            if count > 0.0 {
                expected += ln_gamma(beta + count) - ln_gamma(beta);
            }
        }
        assert!((m.log_likelihood(&params) - expected).abs() < 1e-9 * expected.abs());
        let e = m.evaluate(&params);
        assert!((e.metrics["loglik_per_token"] * n as f64 - e.metrics["loglik"]).abs() < 1e-6);
    }

    #[test]
    fn bad_corpora_are_named() {
        let err = |cells: &[(u32, u32, u32)], vocabulary: usize| {
            let config = LdaConfig {
                topics: 2,
                alpha: 0.1,
                beta: 0.01,
                updates: LdaUpdates::Deltas,
            };
            Lda::from_table(
                Path::new("c.parquet"),
                &table(cells),
                self::vocabulary(vocabulary),
                config,
            )
            .expect_err("refused")
            .to_string()
        };
        assert!(err(&[(0, 1, 1), (2, 1, 1)], 5).contains("document 1 has no words"));
        assert!(err(&[(0, 7, 1)], 5).contains("column 'word' row 0 is 7"));
        assert!(err(&[(0, 1, 0)], 5).contains("column 'count' row 0 is 0"));
        assert!(err(&[(0, 1, 1), (0, 1, 2)], 5).contains("document 0 lists word 1 twice"));
        assert!(err(&[], 5).contains("no documents"));
        assert!(err(&[(0, 1, 1)], 0).contains("vocabulary is empty"));
    }
}
