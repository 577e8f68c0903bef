//! `forestall bench PIPELINE.toml`: run a sweep, write raw results and a
//! report; resume an interrupted one; compare with a baseline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::Context;
use clap::Args;

use super::output::{print_stdout, progress_bar};
use super::run::GIT_REVISION;
use super::GlobalArgs;
use crate::bench::baseline::{self, compare_with_baseline};
use crate::bench::peers::{self, PeersOutcome};
use crate::bench::resume::{self, pipeline_hash, start_in, BenchManifest, Start};
use crate::bench::{
    machine::this_machine, plan_pipeline, report, results::write_rows, run_pipeline,
};
use crate::fsutil::{fresh_dir, utc_date, write_atomic};
use crate::report::json;

/// Arguments of `forestall bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The pipeline file (TOML), e.g. pipelines/baseline.toml.
    pub pipeline: PathBuf,
    /// Results directory (default: runs/DATE-HOST-NAME beside the
    /// pipeline). Each job's rows are written there as it finishes; the same
    /// command run again into the same directory skips the jobs already
    /// complete (same pipeline, jobs and git revision, else it refuses).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// An earlier results directory of the same pipeline to compare with:
    /// a row (the runs that differ only in their seed) moved when its mean
    /// time per iteration or test accuracy changed by more than the larger
    /// range (max − min) between seeds in either bench, and at least 2 % of
    /// the baseline's time or 0.005 of accuracy. Exit 1 when a row got slower
    /// or less accurate beyond that; warns when the machine (CPU model) or the
    /// git revision differs. Written to baseline.md.
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    /// Run only this sweep of the pipeline, and the peers that mirror it
    /// (repeatable; default: every sweep).
    #[arg(long = "sweep", value_name = "NAME")]
    pub sweeps: Vec<String>,
}

/// Keeps the sweeps named `names` of `spec` (and its planned `runs`, and the
/// peers that mirror them), refusing a name the pipeline does not have.
// The error type is the bench's, whose run errors travel unboxed.
#[allow(clippy::result_large_err)]
fn select_sweeps(
    path: &Path,
    spec: &mut crate::bench::spec::PipelineSpec,
    runs: &mut Vec<(crate::bench::spec::RunSpec, crate::spec::JobPlan)>,
    names: &[String],
) -> Result<(), crate::bench::BenchError> {
    if names.is_empty() {
        return Ok(());
    }
    if let Some(unknown) = names
        .iter()
        .find(|n| !spec.sweeps.iter().any(|s| &s.name == *n))
    {
        let all: Vec<&str> = spec.sweeps.iter().map(|s| s.name.as_str()).collect();
        return Err(crate::bench::BenchError::Pipeline {
            path: path.to_owned(),
            message: format!(
                "--sweep {unknown}: no such sweep (the pipeline's: {})",
                all.join(", ")
            ),
        });
    }
    spec.sweeps.retain(|s| names.contains(&s.name));
    spec.peers.retain(|p| names.contains(&p.sweep));
    runs.retain(|(r, _)| names.contains(&r.sweep));
    Ok(())
}

/// The rows of the `--baseline` directory, refusing one that is not a
/// finished bench of `pipeline`, with a warning for each way its origin
/// differs from this bench's.
fn read_baseline(
    dir: &Path,
    pipeline: &str,
    machine: &crate::bench::machine::Machine,
    global: &GlobalArgs,
) -> anyhow::Result<Vec<crate::bench::BenchRow>> {
    use crate::bench::dir::{bench_origin, bench_rows, is_bench_dir};
    if !dir.is_dir() {
        anyhow::bail!("--baseline {}: not a directory", dir.display());
    }
    if !is_bench_dir(dir) {
        anyhow::bail!(
            "--baseline {}: not a bench results directory (no bench.json, no raw.parquet with README.md)",
            dir.display()
        );
    }
    let origin = bench_origin(dir);
    match &origin.name {
        Some(name) if name == pipeline => {}
        Some(name) => anyhow::bail!(
            "--baseline {}: results of the bench '{name}', not of '{pipeline}'",
            dir.display()
        ),
        None => anyhow::bail!(
            "--baseline {}: cannot tell which bench it holds (no bench.json, no title in README.md)",
            dir.display()
        ),
    }
    let (rows, finished) =
        bench_rows(dir).map_err(|e| anyhow::anyhow!("--baseline {}: {e}", dir.display()))?;
    if !finished {
        anyhow::bail!(
            "--baseline {}: an unfinished bench (no raw.parquet); finish it by running its command again",
            dir.display()
        );
    }
    match &origin.cpu {
        Some(cpu) if *cpu != machine.cpu => super::runs::warn(
            global,
            &format!(
                "the baseline {} ran on another machine (CPU {cpu}; this one: {}): its times are not comparable",
                dir.display(),
                machine.cpu
            ),
        ),
        Some(_) => {}
        None => super::runs::warn(
            global,
            &format!("the baseline {} does not record its CPU model", dir.display()),
        ),
    }
    if let Some(rev) = origin
        .git_revision
        .as_deref()
        .filter(|r| *r != GIT_REVISION)
    {
        super::runs::warn(
            global,
            &format!(
                "the baseline {} comes from git revision {rev}, this bench from {GIT_REVISION}",
                dir.display()
            ),
        );
    }
    Ok(rows)
}

/// Runs `forestall bench`.
pub fn run(args: BenchArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let (mut spec, mut runs) = plan_pipeline(&args.pipeline)?;
    select_sweeps(&args.pipeline, &mut spec, &mut runs, &args.sweeps)?;
    let peer_jobs = peers::plan_peers(&args.pipeline, &spec, &runs)?;
    for note in crate::bench::precheck::check_runs(&runs)? {
        if global.quiet == 0 && !global.json {
            eprintln!("note: {note}");
        }
    }
    let machine = this_machine();
    let baseline_rows = match &args.baseline {
        Some(dir) => Some(read_baseline(dir, &spec.bench.name, &machine, global)?),
        None => None,
    };
    let date = utc_date(SystemTime::now());
    let manifest = BenchManifest {
        pipeline: spec.bench.name.clone(),
        pipeline_hash: pipeline_hash(&runs),
        git_revision: GIT_REVISION.to_owned(),
        date: crate::bench::machine::utc_time(SystemTime::now()),
        runs: runs.len(),
        machine: machine.clone(),
    };
    let out_dir = match &args.out {
        Some(dir) => dir.clone(),
        None => {
            let base = args
                .pipeline
                .parent()
                .unwrap_or_else(|| Path::new("."))
                .join("runs")
                .join(format!("{date}-{}-{}", machine.host, spec.bench.name));
            // today's unfinished run of this bench continues; anything else
            // gets a directory of its own
            let unfinished =
                !base.join("raw.parquet").exists() && start_in(&base, &manifest).is_ok();
            if unfinished {
                base
            } else {
                fresh_dir(&base)
            }
        }
    };
    let done = match start_in(&out_dir, &manifest)? {
        Start::Fresh => {
            std::fs::create_dir_all(&out_dir)
                .with_context(|| format!("cannot create {}", out_dir.display()))?;
            // The command as it can be run again: with the peers' Python
            // when the environment chose it.
            let python = std::env::var(crate::bench::peers::PYTHON_ENV)
                .ok()
                .map(|v| format!("{}={v}", crate::bench::peers::PYTHON_ENV));
            let command: Vec<String> = python.into_iter().chain(std::env::args()).collect();
            let command = command.join(" ");
            write_atomic(
                &out_dir.join("README.md"),
                report::readme(&spec, &command, GIT_REVISION, &date, &machine, runs.len())
                    .as_bytes(),
            )?;
            let json = serde_json::to_vec_pretty(&manifest).context("cannot encode bench.json")?;
            write_atomic(&out_dir.join(resume::MANIFEST), &json)?;
            Default::default()
        }
        Start::Resume { done, unreadable } => {
            for e in &unreadable {
                super::runs::warn(global, &format!("{e:#}; its job runs again"));
            }
            if !global.json && global.quiet == 0 {
                eprintln!(
                    "resuming {}: {} of {} jobs complete, running the rest",
                    out_dir.display(),
                    done.len(),
                    runs.len()
                );
            }
            done
        }
    };
    if !global.json && global.quiet == 0 {
        eprintln!(
            "bench {}: {} runs → {}",
            spec.bench.name,
            runs.len(),
            out_dir.display()
        );
    }
    if GIT_REVISION.ends_with("-dirty") {
        tracing::warn!(
            revision = GIT_REVISION,
            "this binary was built from uncommitted changes; its figures cannot be tied to a commit"
        );
    }
    // the peers run after forestall's jobs, with a Python that imports torch
    let python = peers::python();
    let peers_ready = if peer_jobs.is_empty() {
        None
    } else {
        match peers::torch_version(&python) {
            Ok(_) => Some(Ok(())),
            Err(why) => {
                let why = format!(
                    "{why}; install torch there or set {} to a Python that has it",
                    peers::PYTHON_ENV
                );
                if global.json {
                    print_stdout(&json::line("peers_skipped", &why));
                } else {
                    eprintln!("peers skipped: {why}");
                }
                Some(Err(why))
            }
        }
    };
    let bar = progress_bar(global, runs.len() as u64, "runs");
    // the ETA counts the jobs still to run
    bar.set_position(done.len() as u64);
    bar.reset_eta();
    if global.json {
        for row in done.values().flatten() {
            print_stdout(&json::line("run", row));
        }
    }
    let rows = run_pipeline(&runs, &out_dir, GIT_REVISION, &done, |row| {
        if row.kind.is_timely() {
            bar.inc(1);
        }
        bar.set_message(format!(
            "{} {} w={} delay={} seed={}: {:.1} ms/iteration",
            row.sweep,
            row.kind,
            row.workers,
            row.delay_percent,
            row.seed,
            row.time_per_iteration_ms
        ));
        if global.json {
            print_stdout(&json::line("run", row));
        }
    })?;
    bar.finish_and_clear();
    let outcome = match peers_ready {
        None => PeersOutcome::None,
        Some(Err(why)) => PeersOutcome::Skipped(why),
        Some(Ok(())) => {
            let peer_bar = progress_bar(global, peer_jobs.len() as u64, "peer runs");
            let peer_rows = peers::run_peers(&python, &peer_jobs, &out_dir, |row| {
                peer_bar.inc(1);
                peer_bar.set_message(format!(
                    "{} seed={} delay={}: {:.1} ms",
                    row.job.peer, row.job.seed, row.job.delay_percent, row.time_per_iteration_ms
                ));
            })?;
            peer_bar.finish_and_clear();
            if global.json {
                for row in &peer_rows {
                    print_stdout(&json::line("peer", row));
                }
            }
            PeersOutcome::Ran(peer_rows)
        }
    };
    if let PeersOutcome::Ran(peer_rows) = &outcome {
        let json = serde_json::to_vec_pretty(peer_rows).context("cannot encode peers.json")?;
        write_atomic(&out_dir.join("peers.json"), &json)?;
    }
    write_rows(&out_dir.join("raw.parquet"), &rows).context("cannot write raw.parquet")?;
    let plots = report::plots(&spec, &rows, &out_dir);
    let mut summary = report::summary(&spec, &rows);
    summary.push_str(&peers::summary_section(&outcome, &rows));
    for plot in plots
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
    {
        if let Some(name) = plot.file_name() {
            summary.push_str(&format!("![{0}]({0})\n\n", name.to_string_lossy()));
        }
    }
    write_atomic(&out_dir.join("summary.md"), summary.as_bytes())?;
    let compared = baseline_rows
        .as_ref()
        .map(|b| compare_with_baseline(&rows, b));
    if let (Some(c), Some(dir)) = (&compared, &args.baseline) {
        let md = baseline::to_markdown(c, &dir.display().to_string(), true);
        write_atomic(&out_dir.join("baseline.md"), md.as_bytes())?;
    }
    if global.json {
        #[derive(serde::Serialize)]
        struct Done {
            out_dir: String,
            runs: usize,
        }
        if let Some(c) = &compared {
            for m in &c.rows {
                print_stdout(&json::line("baseline", m));
            }
            #[derive(serde::Serialize)]
            struct Only<'a> {
                only_new: &'a [baseline::RowKey],
                only_baseline: &'a [baseline::RowKey],
                regressed: bool,
            }
            print_stdout(&json::line(
                "baseline_summary",
                &Only {
                    only_new: &c.only_new,
                    only_baseline: &c.only_baseline,
                    regressed: c.regressed(),
                },
            ));
        }
        print_stdout(&json::line(
            "summary",
            &Done {
                out_dir: out_dir.display().to_string(),
                runs: rows.len(),
            },
        ));
    } else {
        print_stdout(summary.trim_end());
        if let (Some(c), Some(dir)) = (&compared, &args.baseline) {
            print_stdout("");
            print_stdout(baseline::to_markdown(c, &dir.display().to_string(), false).trim_end());
        }
        print_stdout(&format!("\nresults in {}", out_dir.display()));
    }
    let all_equal = rows.iter().all(|r| r.digest_matches);
    if !all_equal {
        eprintln!("error: some runs with the same math produced different parameters");
        return Ok(ExitCode::from(1));
    }
    if compared.as_ref().is_some_and(|c| c.regressed()) {
        eprintln!("error: some rows got slower or less accurate than the baseline beyond the spread between seeds");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
