#!/bin/sh
# forestall in the what-if replay of synthetic traces: 8, 64 and 1,000
# workers; 2, 4 and 16 units a worker (`trace synth`'s defaults otherwise);
# slow-worker (p = 0.1, 400 %), disrupted-machine (400 %), power-law (α = 4),
# persistent and none; every worker-iteration scaled by a draw in 1 ± 0.1;
# seeds 1 and 2; every unit whole (1) or in 4 micro-batches.
# Prints TSV: workers units pattern micro-batches seed vs_bound messages/iteration.
# BIN is the forestall binary (`cargo build --release`).
set -e
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for size in "8 300" "64 150" "1000 30"; do
  set -- $size
  for units in 2 4 16; do
    for pattern in slow-worker disrupted-machine power-law persistent none; do
      case $pattern in
        slow-worker) knobs="--knob probability=0.1 --knob delay_percent=400" ;;
        disrupted-machine) knobs="--knob delay_percent=400" ;;
        power-law) knobs="--knob alpha=4" ;;
        *) knobs="" ;;
      esac
      for seed in 1 2; do
        d=$T/$1-$units-$pattern-$seed
        "$BIN" trace synth --workers $1 --iterations $2 --units $units --pattern $pattern \
          $knobs --jitter 0.1 --seed $seed --out $d --json > /dev/null
        for mb in 1 4; do
          "$BIN" whatif $d --policy forestall --micro-batches $mb --json --no-progress |
            python3 -c '
import sys, json
for line in sys.stdin:
    j = json.loads(line)
    if j["type"] == "whatif":
        d = j["data"]
        print("\t".join(map(str, [d["workers"], sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4],
            "%.4f" % d["vs_bound"], "%.1f" % d["messages_per_iteration"]])))
' $units $pattern $mb $seed
        done
        rm -rf $d
      done
    done
  done
done
