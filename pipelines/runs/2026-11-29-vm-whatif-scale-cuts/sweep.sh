#!/usr/bin/env bash
# The what-if replay at scale with each unit in 1, 4 or 8 micro-batches,
# before and after the broker balances micro-batches (cuts). Build the bench binary at
# each revision (`cargo bench --bench whatif_scale --no-run`) and copy it to
# $BEFORE and $AFTER, then run this script; it prints one markdown row per
# configuration. The replay is deterministic: the ratios do not depend on
# the machine, the times do.
set -euo pipefail
: "${BEFORE:?the bench binary before}" "${AFTER:?the bench binary after}"
row() { # workers iterations micro-batches policies
  for bin in "$BEFORE" "$AFTER"; do
    WORKERS=$1 ITERATIONS=$2 MICRO_BATCHES=$3 POLICIES=$4 "$bin" 2>/dev/null |
      awk -F'|' -v w="$1" -v mb="$3" -v b="$(basename "$bin")" \
        '/^\| replay/ { gsub(/ /, "", $2); sub(/replay/, "", $2); print "| " w " | " mb " | " b " | " $2 " | " $3 " | " $7 " | " $9 " |" }'
  done
}
echo "| workers | micro-batches | binary | policy | wall s | vs bound | messages/it |"
echo "|---|---|---|---|---|---|---|"
for w in 64 256 1000; do
  for mb in 1 4 8; do row "$w" 300 "$mb" forestall; done
done
for mb in 4 8; do row 10000 1000 "$mb" forestall; done
