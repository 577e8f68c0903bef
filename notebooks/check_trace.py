#!/usr/bin/env python3
"""Check a forestall run directory's Parquet traces from Python, with pyarrow only.

    python3 notebooks/check_trace.py RUN_DIR

RUN_DIR is what `forestall run ... --out RUN_DIR` wrote: it holds trace/{units,
workers,iterations}/part-*.parquet and, next to them, plan.json and summary.json.
The checks follow docs/trace-schema.md (schema version 9; parts of version 8,
which have the same columns (version 9 added the `tail` action), of version 7,
which lack `workers.params_transit_us`, of version 6, which also lack `units.send_us`, `units.gt_link_mbps` and `workers.transit_us`, of
version 5, which also lack `units.micro_batches`, of version 4, which also lack
`workers.wasted_us`, of version 3, which also lack
`workers.control_bytes`, and of version 2, which also lack
`iterations.workload` and `iterations.test_metrics`, are accepted):

- the three tables exist, and each has at least one part;
- every part has the columns of its table with their types, and the
  `forestall.*` metadata: schema_version 9 (or 8, 7, 6, 5, 4, 3, 2), the right table, and the same
  job_id, git_revision, plan_hash and seed as every other part; its `job_id`
  column holds that job_id in every row, and a job_id `<name>-<12 hex>` (as the
  CLI writes it) matches the plan_hash;
- only the nullable columns hold nulls;
- `iterations` has one row per iteration 0..n-1;
- `iterations.workload` is one non-empty name for the whole run, the workload
  of summary.json and plan.json when those are present;
- `iterations.test_metrics` is null or a JSON object of metric names (without
  a `test_` prefix) to numbers or null, never `{}`, and only set in evaluated
  iterations (where `test_loss` is set);
- `units` has one row per (iteration, partition, unit), for every partition and
  unit of the plan, except that a speculative `clone`, a `split` first part
  or a `tail` may repeat a unit and the
  units of partitions an iteration dropped (backup workers) may be missing;
- `workers` has one row per (iteration, worker);
- the counts agree with plan.json and summary.json when those are present.

Prints one `OK ...` line and exits 0, or lists every problem found on stderr
and exits 1 (2 for a usage error).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

SCHEMA_VERSION = "9"
# Versions this checker reads; version 8 has version 9's columns (9 added the
# `tail` action), version 7 lacks the columns of ADDED_IN_V8,
# version 6 those of ADDED_IN_V7 too,
# version 5 those of ADDED_IN_V6 too,
# version 4 those of ADDED_IN_V5 too, version 3 those of ADDED_IN_V4 too,
# version 2 those of ADDED_IN_V3 too.
READABLE_VERSIONS = ("2", "3", "4", "5", "6", "7", "8", "9")
ADDED_IN_V3 = {"iterations": ("workload", "test_metrics")}
ADDED_IN_V4 = {"workers": ("control_bytes",)}
ADDED_IN_V5 = {"workers": ("wasted_us",)}
ADDED_IN_V6 = {"units": ("micro_batches",)}
ADDED_IN_V7 = {"units": ("send_us", "gt_link_mbps"), "workers": ("transit_us",)}
ADDED_IN_V8 = {"workers": ("params_transit_us",)}
TABLES = ("units", "workers", "iterations")
STAMP_KEYS = ("job_id", "git_revision", "plan_hash", "seed")

# (column, type, nullable), in the order of docs/trace-schema.md.
COLUMNS: dict[str, list[tuple[str, pa.DataType, bool]]] = {
    "units": [
        ("job_id", pa.string(), False),
        ("iteration", pa.uint64(), False),
        ("worker", pa.uint32(), False),
        ("process", pa.uint32(), False),
        ("partition", pa.uint32(), False),
        ("unit", pa.uint32(), False),
        ("owner", pa.uint32(), False),
        ("executor", pa.uint32(), False),
        ("start_us", pa.uint64(), False),
        ("end_us", pa.uint64(), False),
        ("compute_us", pa.uint64(), False),
        ("wait_us", pa.uint64(), False),
        ("rows", pa.uint32(), False),
        ("bytes_sent", pa.uint64(), False),
        ("action", pa.string(), False),
        ("gt_slowdown", pa.float64(), False),
        ("gt_delay_us", pa.uint64(), False),
        ("micro_batches", pa.uint32(), False),
        ("send_us", pa.uint64(), False),
        ("gt_link_mbps", pa.float64(), False),
    ],
    "workers": [
        ("job_id", pa.string(), False),
        ("iteration", pa.uint64(), False),
        ("worker", pa.uint32(), False),
        ("process", pa.uint32(), False),
        ("units", pa.uint32(), False),
        ("rows", pa.uint64(), False),
        ("ready_us", pa.uint64(), False),
        ("finish_us", pa.uint64(), False),
        ("compute_us", pa.uint64(), False),
        ("busy_us", pa.uint64(), False),
        ("barrier_wait_us", pa.uint64(), False),
        ("operator_us", pa.uint64(), False),
        ("bytes_sent", pa.uint64(), False),
        ("bytes_moved", pa.uint64(), False),
        ("units_given", pa.uint32(), False),
        ("control_sent", pa.uint32(), False),
        ("control_bytes", pa.uint64(), False),
        ("units_cancelled", pa.uint32(), False),
        ("wasted_us", pa.uint64(), False),
        ("transit_us", pa.uint64(), False),
        ("params_transit_us", pa.uint64(), False),
        ("params_version", pa.uint64(), False),
        ("predicted_unit_us", pa.float64(), True),
        ("gt_slowdown", pa.float64(), False),
        ("gt_delay_us", pa.uint64(), False),
    ],
    "iterations": [
        ("job_id", pa.string(), False),
        ("iteration", pa.uint64(), False),
        ("start_us", pa.uint64(), False),
        ("end_us", pa.uint64(), False),
        ("wall_us", pa.uint64(), False),
        ("train_loss", pa.float64(), False),
        ("test_loss", pa.float64(), True),
        ("test_accuracy", pa.float64(), True),
        ("laggard", pa.uint32(), True),
        ("lag_us", pa.uint64(), False),
        ("median_busy_us", pa.uint64(), False),
        ("barrier_wait_us", pa.uint64(), False),
        ("units", pa.uint32(), False),
        ("rows", pa.uint64(), False),
        ("dropped_partitions", pa.string(), False),
        ("workload", pa.string(), False),
        ("test_metrics", pa.string(), True),
    ],
}

# Problems listed before the rest are summed up.
MAX_SHOWN = 25

# The documented values of units.action.
UNIT_ACTIONS = {"assigned", "reassigned", "clone", "split", "tail"}


class Problems:
    """Collects what is wrong, so one run reports everything it can see."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        self.items.append(message)

    def __bool__(self) -> bool:
        return bool(self.items)


def read_json(path: Path, problems: Problems) -> dict | None:
    if not path.is_file():
        return None
    try:
        with path.open() as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        problems.add(f"{path}: not readable JSON ({e})")
        return None
    if not isinstance(value, dict):
        problems.add(f"{path}: expected a JSON object")
        return None
    return value


def columns_of(table: str, version: str | None) -> list[tuple[str, pa.DataType, bool]]:
    """The columns a part of `table` written with schema `version` has."""
    added: tuple[str, ...] = ()
    if version in ("2", "3", "4", "5", "6", "7"):
        added += ADDED_IN_V8.get(table, ())
    if version in ("2", "3", "4", "5", "6"):
        added += ADDED_IN_V7.get(table, ())
    if version in ("2", "3", "4", "5"):
        added += ADDED_IN_V6.get(table, ())
    if version in ("2", "3", "4"):
        added += ADDED_IN_V5.get(table, ())
    if version in ("2", "3"):
        added += ADDED_IN_V4.get(table, ())
    if version == "2":
        added += ADDED_IN_V3.get(table, ())
    return [c for c in COLUMNS[table] if c[0] not in added]


def check_part(table: str, path: str, problems: Problems) -> tuple[dict[str, str], str | None] | None:
    """Checks one part's schema and metadata; returns its stamp and schema version."""
    try:
        footer = pq.ParquetFile(path)
        schema = footer.schema_arrow
    except Exception as e:  # pyarrow raises several kinds for a broken file
        problems.add(f"{path}: not a readable Parquet file ({e})")
        return None
    raw = footer.metadata.metadata or {}  # the file footer's key-value metadata
    meta = {k.decode(): v.decode(errors="replace") for k, v in raw.items()}
    version = meta.get("forestall.schema_version")
    for name, dtype, _ in columns_of(table, version):
        idx = schema.get_field_index(name)
        if idx < 0:
            problems.add(f"{path}: column `{name}` is missing")
        elif not schema.field(idx).type.equals(dtype):
            problems.add(
                f"{path}: column `{name}` has type {schema.field(idx).type}, expected {dtype}"
            )
    if version is None:
        problems.add(f"{path}: no `forestall.schema_version` metadata")
    elif version not in READABLE_VERSIONS:
        problems.add(
            f"{path}: forestall.schema_version is {version!r}, this checker reads "
            f"{' and '.join(READABLE_VERSIONS)}"
        )
    if meta.get("forestall.table") != table:
        problems.add(
            f"{path}: forestall.table is {meta.get('forestall.table')!r}, expected {table!r}"
        )
    stamp = {}
    for key in STAMP_KEYS:
        value = meta.get(f"forestall.{key}")
        if value is None:
            problems.add(f"{path}: no `forestall.{key}` metadata")
        else:
            stamp[key] = value
    seed = stamp.get("seed")
    if seed is not None and not (seed.isdigit() and int(seed) < 2**64):
        problems.add(f"{path}: forestall.seed {seed!r} is not a decimal u64")
    return stamp, version


def check_job_id_column(path: str, stamp: dict[str, str], problems: Problems) -> None:
    if "job_id" not in stamp:
        return
    try:
        col = pq.read_table(path, columns=["job_id"]).column("job_id")
    except Exception:  # reported by check_part already (missing column)
        return
    values = pc.unique(col.drop_null()).to_pylist()
    if any(v != stamp["job_id"] for v in values):
        problems.add(
            f"{path}: job_id column holds {values[:3]}, metadata says {stamp['job_id']!r}"
        )


def load_table(
    trace: Path, table: str, problems: Problems, stamps: dict, versions: set
) -> pa.Table | None:
    directory = trace / table
    if not directory.is_dir():
        problems.add(f"{directory}: table directory is missing")
        return None
    # pyarrow's datasets skip hidden files (`.part-*.tmp`), as forestall's reader does.
    files = sorted(ds.dataset(str(directory), format="parquet").files)
    if not files:
        problems.add(f"{directory}: no part files")
        return None
    before = len(problems.items)
    table_versions = set()
    for path in files:
        checked = check_part(table, path, problems)
        if checked is not None:
            stamp, version = checked
            stamps[path] = stamp
            table_versions.add(version)
            check_job_id_column(path, stamp, problems)
    if len(problems.items) > before:
        return None  # the schema is wrong; row checks would only add noise
    versions |= table_versions
    # The columns every part has: those of its oldest version.
    oldest = min(table_versions, key=lambda v: int(v) if v and v.isdigit() else 0)
    columns = columns_of(table, oldest)
    names = [name for name, _, _ in columns]
    # The dataset's schema is the first part's; give the common one so a
    # version-2 part does not fail for lacking a version-3 column.
    common = pa.schema([pa.field(name, dtype) for name, dtype, _ in columns])
    result = ds.dataset(files, schema=common, format="parquet").to_table(columns=names)
    for name, _, nullable in columns:
        nulls = result.column(name).null_count
        if nulls and not nullable:
            problems.add(f"{table}: column `{name}` is not nullable but holds {nulls} nulls")
    return result


def duplicates(table: pa.Table, keys: list[str]) -> tuple[int, list[dict]]:
    """Number of keys seen more than once, and a few of them."""
    counts = table.group_by(keys).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    return dup.num_rows, dup.slice(0, 3).to_pylist()


def check_workload(
    iterations: pa.Table, plan: dict | None, summary: dict | None, problems: Problems
) -> str | None:
    """One workload name for the run, agreeing with plan.json and summary.json."""
    if "workload" not in iterations.column_names:
        return None  # version 2
    names = pc.unique(iterations.column("workload").drop_null()).to_pylist()
    if len(names) != 1 or not names[0]:
        problems.add(f"iterations: workload should be one non-empty name for the run, found {names[:5]}")
        return None
    workload = names[0]
    model = plan.get("model") if plan is not None else None
    expected = [
        ("plan.json", model.get("kind") if isinstance(model, dict) else None),
        ("summary.json", summary.get("workload") if summary is not None else None),
    ]
    for source, kind in expected:
        if kind is not None and kind != workload:
            problems.add(f"iterations: workload is {workload!r}, {source} says {kind!r}")
    return workload


def reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def check_test_metrics(iterations: pa.Table, problems: Problems) -> None:
    """Null or a JSON object of numbers (or null), set only where test_loss is."""
    if "test_metrics" not in iterations.column_names:
        return  # version 2
    bad: list[str] = []
    for t, loss, text in zip(
        iterations.column("iteration").to_pylist(),
        iterations.column("test_loss").to_pylist(),
        iterations.column("test_metrics").to_pylist(),
    ):
        if text is None:
            continue
        try:
            value = json.loads(text, parse_constant=reject_constant)
        except ValueError as e:
            bad.append(f"iteration {t}: {text!r} is not JSON ({e})")
            continue
        if not isinstance(value, dict) or not value:
            bad.append(f"iteration {t}: {text!r} is not a non-empty JSON object (null when there are none)")
            continue
        for name, number in value.items():
            if name.startswith("test_"):
                bad.append(f"iteration {t}: metric {name!r} should not carry the test_ prefix")
            if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))):
                bad.append(f"iteration {t}: metric {name!r} is {number!r}, not a number")
        if loss is None:
            bad.append(f"iteration {t}: test_metrics {text!r} but no test_loss (not evaluated)")
    if bad:
        problems.add(f"iterations: {len(bad)} bad test_metrics, e.g. {'; '.join(bad[:3])}")


def check_trace(run_dir: Path) -> tuple[Problems, str]:
    problems = Problems()
    trace = run_dir / "trace"
    if not trace.is_dir():
        problems.add(f"{trace}: no trace directory (is {run_dir} a forestall run directory?)")
        return problems, ""
    plan = read_json(run_dir / "plan.json", problems)
    summary = read_json(run_dir / "summary.json", problems)

    stamps: dict[str, dict[str, str]] = {}
    versions: set[str] = set()
    tables = {t: load_table(trace, t, problems, stamps, versions) for t in TABLES}

    # One run per directory: every part carries the same stamp.
    for key in STAMP_KEYS:
        seen: dict[str, str] = {}
        for path, stamp in stamps.items():
            if key in stamp:
                seen.setdefault(stamp[key], path)
        if len(seen) > 1:
            listing = "; ".join(f"{v!r} in {p}" for v, p in seen.items())
            problems.add(f"parts disagree on forestall.{key}: {listing}")
    stamp = next(iter(stamps.values()), {})
    job_id, plan_hash = stamp.get("job_id", "?"), stamp.get("plan_hash", "?")
    # The CLI names a job `<name>-<first 12 hex digits of the plan hash>`.
    suffix = job_id.rsplit("-", 1)[-1] if "-" in job_id else ""
    if len(suffix) == 12 and all(c in "0123456789abcdef" for c in suffix):
        if plan_hash != "?" and not plan_hash.startswith(suffix):
            problems.add(f"forestall.job_id {job_id!r} does not match forestall.plan_hash {plan_hash!r}")
    if plan is not None and "seed" in plan and "seed" in stamp and str(plan["seed"]) != stamp["seed"]:
        problems.add(f"forestall.seed is {stamp['seed']}, plan.json says {plan['seed']}")
    if summary is not None and "job" in summary and "job_id" in stamp:
        if not stamp["job_id"].startswith(str(summary["job"])):
            problems.add(
                f"forestall.job_id {stamp['job_id']!r} is not for job {summary['job']!r} of summary.json"
            )

    iterations, units, workers = tables["iterations"], tables["units"], tables["workers"]
    n = None
    if iterations is not None:
        its = sorted(iterations.column("iteration").to_pylist())
        n = len(its)
        if its != list(range(n)):
            dup, some = duplicates(iterations, ["iteration"])
            missing = sorted(set(range(max(its, default=-1) + 1)) - set(its))[:5]
            problems.add(
                f"iterations: expected one row per iteration 0..{n - 1}; "
                f"{dup} duplicated (e.g. {some}), missing e.g. {missing}"
            )
        for source, doc in (("plan.json", plan), ("summary.json", summary)):
            if doc is not None and "iterations" in doc and doc["iterations"] != n:
                problems.add(f"iterations: {n} rows, {source} says {doc['iterations']} iterations")
        laggards = pc.unique(iterations.column("laggard").drop_null()).to_pylist()
        workload = check_workload(iterations, plan, summary, problems)
        check_test_metrics(iterations, problems)
    else:
        laggards = []
        workload = None

    n_workers = None
    for source, doc in (("plan.json", plan), ("summary.json", summary)):
        if doc is not None and isinstance(doc.get("workers"), int):
            n_workers = doc["workers"]
            break
    if workers is not None:
        dup, some = duplicates(workers, ["iteration", "worker"])
        if dup:
            problems.add(f"workers: {dup} (iteration, worker) pairs have several rows, e.g. {some}")
        seen_workers = sorted(pc.unique(workers.column("worker")).to_pylist())
        if n_workers is None:
            n_workers = max(seen_workers, default=-1) + 1
        if n is not None and workers.num_rows != n * n_workers:
            problems.add(
                f"workers: {workers.num_rows} rows, expected {n} iterations x {n_workers} workers"
            )
        if any(w >= n_workers for w in seen_workers):
            problems.add(f"workers: worker indices {seen_workers} exceed {n_workers} workers")
    if n_workers is not None and any(w >= n_workers for w in laggards):
        problems.add(f"iterations: laggard indices {laggards} exceed {n_workers} workers")

    if units is not None:
        actions = set(pc.unique(units.column("action")).to_pylist())
        if actions - UNIT_ACTIONS:
            problems.add(f"units: undocumented action values {sorted(actions - UNIT_ACTIONS)}")
        keys = ["iteration", "partition", "unit"]
        # A speculative `clone` may repeat a unit, and so may the `split`
        # first part of a unit whose rest a peer computed and the `tail` of
        # a unit its worker went on with; nothing else may.
        originals = units.filter(
            pc.invert(pc.is_in(units.column("action"), pa.array(["clone", "split", "tail"])))
        )
        dup, some = duplicates(originals, keys)
        if dup:
            problems.add(f"units: {dup} (iteration, partition, unit) keys have several rows, e.g. {some}")

        def extent(column: str, plan_key: str) -> int:
            if plan is not None and isinstance(plan.get(plan_key), int):
                return plan[plan_key]
            return (pc.max(units.column(column)).as_py() or 0) + 1

        partitions = extent("partition", "partitions")
        per_partition = extent("unit", "units_per_partition")
        if n is not None:
            # Backup workers drop partitions (named in the iterations table);
            # their units may be missing. Every other unit must be there.
            dropped: dict[int, set[int]] = {}
            if iterations is not None and "dropped_partitions" in iterations.column_names:
                for t, d in zip(
                    iterations.column("iteration").to_pylist(),
                    iterations.column("dropped_partitions").to_pylist(),
                ):
                    dropped[t] = {int(p) for p in d.split(",") if p}
            present = set(
                zip(
                    units.column("iteration").to_pylist(),
                    units.column("partition").to_pylist(),
                    units.column("unit").to_pylist(),
                )
            )
            missing = [
                (t, p, u)
                for t in range(n)
                for p in range(partitions)
                if p not in dropped.get(t, set())
                for u in range(per_partition)
                if (t, p, u) not in present
            ]
            if missing:
                problems.add(
                    f"units: {len(missing)} (iteration, partition, unit) keys of "
                    f"{n} iterations x {partitions} partitions x {per_partition} units are "
                    f"missing, e.g. {missing[:3]}"
                )
            out_of_range = units.filter(
                pc.or_(
                    pc.or_(
                        pc.greater_equal(units.column("iteration"), n),
                        pc.greater_equal(units.column("partition"), partitions),
                    ),
                    pc.greater_equal(units.column("unit"), per_partition),
                )
            )
            if out_of_range.num_rows:
                problems.add(
                    f"units: {out_of_range.num_rows} rows outside iterations 0..{n - 1}, "
                    f"partitions 0..{partitions - 1}, units 0..{per_partition - 1}"
                )

    rows = {t: (tables[t].num_rows if tables[t] is not None else 0) for t in TABLES}
    schema = " and ".join(f"v{v}" for v in sorted(versions)) or f"v{SCHEMA_VERSION}"
    ok = (
        f"OK {run_dir}: job {job_id}, workload {workload or '?'}, plan {plan_hash[:12]}, "
        f"seed {stamp.get('seed', '?')}, schema {schema}; {n} iterations, {n_workers} workers, "
        f"{rows['units']} units, {rows['workers']} worker rows, {len(stamps)} parts"
    )
    return problems, ok


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print(f"usage: {Path(argv[0]).name} RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    if not run_dir.is_dir():
        print(f"check_trace: {run_dir} is not a directory", file=sys.stderr)
        return 1
    problems, ok = check_trace(run_dir)
    if problems:
        print(f"check_trace: {run_dir}: {len(problems.items)} problem(s):", file=sys.stderr)
        for item in problems.items[:MAX_SHOWN]:
            print(f"  - {item}", file=sys.stderr)
        if len(problems.items) > MAX_SHOWN:
            print(f"  ... and {len(problems.items) - MAX_SHOWN} more", file=sys.stderr)
        return 1
    print(ok)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
