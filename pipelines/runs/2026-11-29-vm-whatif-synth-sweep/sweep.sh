#!/usr/bin/env bash
# The what-if replay over synthetic traces: 4 patterns x W = 8, 64, 256 x
# 4 units of 100 rows or 16 of 25 (10 us a row), 150 iterations, jitter 0.1,
# seeds 1-3; every trace replayed under bsp, rapid-reassign and forestall.
# Usage: sweep.sh FORESTALL_BINARY TRACES_DIR OUT.json
# Prints one line per (pattern, W, units, policy): the mean of the seeds'
# vs-bound figures, and writes every seed's figure to OUT.json.
set -euo pipefail
bin=$1 traces=$2 out=$3
mkdir -p "$traces"
for w in 8 64 256; do
  for p in slow-worker persistent power-law disrupted-machine; do
    for s in 1 2 3; do
      for u in 4 16; do
        d=$traces/$p-w$w-u$u-s$s
        [ -d "$d" ] || "$bin" trace synth -q --workers "$w" --iterations 150 --units "$u" \
          --rows $((400 / u)) --pattern "$p" --jitter 0.1 --seed "$s" --out "$d" > /dev/null
      done
    done
  done
done
for d in "$traces"/*; do
  "$bin" whatif --json -q "$d" --policy bsp,rapid-reassign,forestall
done | python3 -c '
import json, sys, collections, statistics
runs = collections.defaultdict(list)
for line in sys.stdin:
    j = json.loads(line)
    if j["type"] == "whatif":
        d = j["data"]
        key = d["trace"].rstrip("/").split("/")[-1].rsplit("-s", 1)[0] + "|" + d["policy"]
        runs[key].append(d["vs_bound"])
json.dump(runs, open(sys.argv[1], "w"), indent=0, sort_keys=True)
for k in sorted(runs):
    print(f"{k:45s} {statistics.mean(runs[k]):.3f}")
' "$out"
