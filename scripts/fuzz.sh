#!/usr/bin/env bash
# Fuzz the record codec with atheris:
#   scripts/fuzz.sh [--runs N[,M] | --seconds S] [--fast] [-- FLAGS]
#
# Runs both targets of tests/fuzz in parallel (fuzz_batch.py: one batch; fuzz_segment.py: a
# segment's run of batches), each for N inputs (--runs N, or N for the batch target and M for
# the segment target) or S seconds (--seconds S; default 60), seeded with the Kafka-written
# fixtures' batches and segments. FLAGS go to libFuzzer as they are.
#
# With clang on the PATH the extension is rebuilt in a copy of the sources (build/fuzz/src, so
# the in-place build others use stays as it is) with AddressSanitizer and libFuzzer's coverage
# instrumentation, and run under atheris's ASan+libFuzzer runtime (LD_PRELOAD). --fast leaves
# ASan out (about 3x the inputs per second: for long runs, whose corpus can be replayed under
# ASan after, e.g. `scripts/fuzz.sh --runs 0`); libFuzzer is then preloaded alone, linked from
# the copy atheris ships. Without clang only the Python code is coverage-guided.
#
# Corpora grow in build/fuzz/corpus/<target>, findings land in build/fuzz/crashes/, logs in
# build/fuzz/logs/ (one run at a time: build/fuzz is shared). Exits 1 on any finding.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="$root/.venv/bin/python"
work="$root/build/fuzz"

limit=(-max_total_time=60) runs_batch="" runs_segment="" extra=() asan=1
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) asan=""; shift ;;
    --runs) runs_batch="${2%%,*}"; runs_segment="${2##*,}"; limit=(); shift 2 ;;
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--runs N[,M] | --seconds S] [--fast] [-- libFuzzer flags]" >&2; exit 2 ;;
  esac
done

if ! "$py" -c "import atheris" 2>/dev/null; then
  echo "fuzz: atheris is not installed in .venv" >&2
  exit 2
fi
mkdir -p "$work"/{corpus/batch,corpus/segment,crashes,logs}
"$py" "$root/tests/fuzz/seeds.py" "$work/seeds"

env=(PYTHONPATH="$root")
if command -v clang >/dev/null; then
  # A fresh copy of the sources: the instrumented .so never replaces the in-place one.
  rm -rf "$work/src" && mkdir -p "$work/src"
  cp -r "$root/setup.py" "$root/pyproject.toml" "$root/storage" "$work/src/"
  find "$work/src" \( -name '*.so' -o -name '*.c' -o -name __pycache__ \) -prune \
    -exec rm -rf {} +
  (cd "$work/src" && CC=clang LDSHARED="clang -shared" KFS_FUZZ=1 KFS_SANITIZE=${asan:+address} \
    "$py" setup.py -q build_ext --inplace >"$work/logs/build.log" 2>&1) \
    || { cat "$work/logs/build.log" >&2; exit 2; }
  atheris="$("$py" -c 'import atheris; print(atheris.path())')"
  if [ -n "$asan" ]; then
    # PYTHONMALLOC=malloc: every Python object is its own ASan-guarded allocation.
    env=(PYTHONPATH="$work/src" LD_PRELOAD="$atheris/asan_with_fuzzer.so" PYTHONMALLOC=malloc
         ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}")
  else
    clang -shared -o "$work/libfuzzer.so" -Wl,--whole-archive \
      "$atheris/libclang_rt.fuzzer_no_main.a" -Wl,--no-whole-archive -lstdc++ -lpthread -lm
    env=(PYTHONPATH="$work/src" LD_PRELOAD="$work/libfuzzer.so")
  fi
  echo "fuzz: extension built with ${asan:+ASan and }libFuzzer coverage in $work/src" >&2
else
  echo "fuzz: no clang, so the extension is not coverage-instrumented (Python code only)" >&2
fi

declare -A pid
for target in batch segment; do
  runs="runs_$target"
  flags=("${limit[@]}" ${!runs:+-runs=${!runs}} -timeout=60 -print_final_stats=1
         -artifact_prefix="$work/crashes/$target-")
  [ "$target" = segment ] && flags+=(-max_len=16384)
  env "${env[@]}" "$py" "$root/tests/fuzz/fuzz_$target.py" "${flags[@]}" "${extra[@]}" \
    "$work/corpus/$target" "$work/seeds/$target" >"$work/logs/$target.log" 2>&1 &
  pid[$target]=$!
done

status=0
for target in batch segment; do
  result=ok
  wait "${pid[$target]}" || { result="FAILED (see $work/logs/$target.log)"; status=1; }
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/logs/$target.log")
  echo "fuzz $target: ${runs:-?} inputs, $result"
done
ls "$work/crashes" | sed 's/^/fuzz finding: /'
exit $status
