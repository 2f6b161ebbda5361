#!/usr/bin/env bash
# The Spark pipeline end to end, on the default local Spark, in ./pipeline-data:
#   examples/spark_pipeline.sh
# 1. mount, append JSON order lines to orders-0 through the mount;
# 2. Spark reads topic orders, totals per user with SQL, writes topic totals (key = user): the
#    mount is the directory's one writer, so Spark's tasks hand it their batches;
# 3. cat the totals through the same mount, and unmount.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh" spark
backing="$root/pipeline-data"; mnt="$root/pipeline-mnt"
rm -rf "$backing"; mkdir -p "$backing" "$mnt"

"$root/.venv/bin/kfs" mount "$backing" "$mnt"
trap 'fusermount3 -u "$mnt" 2>/dev/null || true' EXIT
mkdir "$mnt/orders-0"
for i in $(seq 1 30); do
  echo "{\"user\": \"user-$((i % 4))\", \"amount\": $i}" >> "$mnt/orders-0/append"
done
echo "appended $(ls "$mnt/orders-0/by-offset" | wc -l) orders"

"$root/.venv/bin/python" "$root/examples/spark_pipeline.py" "$backing"

for f in $(ls "$mnt/totals-0/by-offset" | sort -n); do
  echo "$(getfattr --absolute-names --only-values -n user.kafka.key "$mnt/totals-0/by-offset/$f") -> $(cat "$mnt/totals-0/by-offset/$f")"
done
