#!/usr/bin/env python3
"""Aggregates of forestall's Parquet tables, computed by DuckDB alone.

    python3 notebooks/duckdb_check.py RUN_DIR IMPORT_DIR RAW_PARQUET

RUN_DIR is a `forestall run --out` directory, IMPORT_DIR one trace directory
of a `forestall import bytedance-ops` (with ops.parquet), RAW_PARQUET a
bench's raw.parquet. Prints one JSON object: per-worker barrier wait and
laggard counts of the run, its unit rows, the import's operations per kind and
workers, and the bench's rows per policy. The integration tests compare these
with forestall's own numbers.
"""
import json
import sys

import duckdb


def main(run, imported, raw):
    con = duckdb.connect()

    def rows(sql):
        return con.execute(sql).fetchall()

    out = {
        "barrier_wait_us": {
            str(w): int(s)
            for w, s in rows(
                f"SELECT worker, sum(barrier_wait_us) FROM read_parquet('{run}/trace/workers/*.parquet') GROUP BY worker"
            )
        },
        "laggards": {
            str(w): int(n)
            for w, n in rows(
                f"SELECT laggard, count(*) FROM read_parquet('{run}/trace/iterations/*.parquet') "
                "WHERE laggard IS NOT NULL GROUP BY laggard"
            )
        },
        "units": rows(f"SELECT count(*) FROM read_parquet('{run}/trace/units/*.parquet')")[0][0],
        "ops_by_kind": {
            k: int(n)
            for k, n in rows(f"SELECT optype, count(*) FROM read_parquet('{imported}/ops.parquet') GROUP BY optype")
        },
        "import_workers": rows(
            f"SELECT count(DISTINCT worker) FROM read_parquet('{imported}/trace/workers/*.parquet')"
        )[0][0],
        "bench_rows": rows(f"SELECT count(*) FROM read_parquet('{raw}')")[0][0],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
