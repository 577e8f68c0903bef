#!/bin/sh
# The same number of replayed events spread over 10,000, 1,000 and 100
# workers (workers × iterations = 1,000,000), one thread, 4 micro-batches a
# unit: what one event costs as the workers' state outgrows the caches.
# BIN is the bench binary (`cargo bench --bench whatif_scale --no-run`).
set -e
for size in "10000 100" "1000 1000" "100 10000"; do
  set -- $size
  echo "## $1 workers × $2 iterations"
  WORKERS=$1 ITERATIONS=$2 MICRO_BATCHES=4 THREADS=1 POLICIES=forestall,rapid-reassign "$BIN"
done
