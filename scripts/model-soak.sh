#!/usr/bin/env bash
# The model-based test of the mount (tests/mount/test_mount_model.py) for as long as asked:
#   scripts/model-soak.sh [MINUTES]      (default 10)
#
# Runs it again and again, KFS_MODEL_EXAMPLES examples per run (default 20; KFS_MODEL_STEPS
# steps each, default 30), each run with a fresh random seed (KFS_MODEL_RANDOM=1; the suite's
# own run is derandomized), until MINUTES have passed (the
# run under way then finishes). Stops at the first failure: hypothesis keeps the failing example
# in .hypothesis/, so the next plain `pytest tests/mount/test_mount_model.py` replays it first. Logs in
# build/model-soak/. Exits 1 on a failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
minutes="${1:-10}"
examples="${KFS_MODEL_EXAMPLES:-20}"
logs="$root/build/model-soak"
mkdir -p "$logs"
cd "$root"

began=$(date +%s)
deadline=$(( began + minutes * 60 ))
runs=0
while [ "$(date +%s)" -lt "$deadline" ]; do
  runs=$((runs + 1))
  log="$logs/run-$runs.log"
  start=$(date +%s)
  # --timeout=0: a run takes longer than the suite's per-test limit
  if ! KFS_MODEL_RANDOM=1 KFS_MODEL_EXAMPLES="$examples" .venv/bin/python -m pytest tests/mount/test_mount_model.py -q \
      --timeout=0 -p no:cacheprovider --hypothesis-show-statistics >"$log" 2>&1; then
    tail -n 80 "$log"
    echo "model-soak: run $runs FAILED after $(( ($(date +%s) - began) / 60 )) min (log: $log)" >&2
    exit 1
  fi
  echo "model-soak: run $runs passed: $examples examples in $(( $(date +%s) - start )) s"
done
echo "model-soak: $runs runs, $((runs * examples)) examples, no failure in $minutes min"
