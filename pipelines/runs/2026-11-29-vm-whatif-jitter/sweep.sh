#!/bin/sh
# forestall, rapid-reassign and bsp in the what-if replay of synthetic
# slow-worker traces (p = 0.1, 400 %, 4 units of 100 rows at 10 µs a worker)
# whose workers' times carry a little noise: each worker-iteration scaled by
# a uniform draw in 1 ± jitter. Prints TSV: workers jitter seed policy
# micro-batches vs_bound vs_unit_bound messages/iteration.
# BIN is the forestall binary (`cargo build --release`).
set -e
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for size in "16 400" "64 200" "256 100" "1000 30"; do
  set -- $size
  for jitter in 0 0.01 0.02 0.05 0.1; do
    for seed in 1 2; do
      d=$T/$1-$jitter-$seed
      "$BIN" trace synth --workers $1 --iterations $2 --units 4 --pattern slow-worker \
        --knob probability=0.1 --knob delay_percent=400 --jitter $jitter --seed $seed \
        --out $d --json > /dev/null
      for mb in 1 4; do
        "$BIN" whatif $d --policy forestall,rapid-reassign,bsp --micro-batches $mb --json --no-progress |
          python3 -c '
import sys, json
for line in sys.stdin:
    j = json.loads(line)
    if j["type"] == "whatif":
        d = j["data"]
        print("\t".join(map(str, [d["workers"], sys.argv[1], sys.argv[2], d["policy"], sys.argv[3],
            "%.4f" % d["vs_bound"], "%.4f" % d["vs_unit_bound"], "%.1f" % d["messages_per_iteration"]])))
' $jitter $seed $mb
      done
      rm -rf $d
    done
  done
done
