#!/usr/bin/env bash
# Mutation testing of storage/'s pure-Python modules with mutmut (issue 41):
#   scripts/mutation.sh [MODULE...]      e.g. scripts/mutation.sh log_segments batch_planning
#
# For each module (default: every module listed in MODULE_TESTS below) mutmut makes its mutants
# (comparisons flipped, constants +-1, and/or, +/-, return None, negated conditions, ...) and
# runs, for each, the tests of that module's line below that reach the mutated function; a
# mutant no test fails "survived". Prints each module's score (killed / all mutants) and its
# survivors; `.venv/bin/python -m mutmut show NAME` in build/mutation/MODULE shows one as a
# diff.
# Not in CI (minutes per module): run it before an engine change lands. mutmut is installed
# into .venv on first use; it is no dependency of kfs.
#
# MUTATION_CHILDREN=N sets how many mutants run at once (default 2, the machine's cores; 1 on a
# machine someone else is using).
#
# Each module runs in its own copy of the checkout (build/mutation/MODULE, mutmut's mutants/
# under it), so the working tree is never mutated and a killed run leaves nothing behind.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="$root/.venv/bin/python"
# mutmut through the interpreter, not .venv/bin/mutmut: that script's first line names the
# interpreter path it was installed through, which a worktree's linked .venv does not keep
mutmut=("$py" -m mutmut)
children="${MUTATION_CHILDREN:-2}"
work="$root/build/mutation"
# a mutant that loops on a write (an append that never rolls, a short write never done) would
# fill the disk before its timeout: no file of a run grows past 1 GiB (SIGXFSZ kills it)
ulimit -f $((1024 * 1024))

# module -> the test files that exercise it (no FUSE, no broker: those are too slow per mutant;
# no test whose child process imports storage/: mutmut's mutants fail to load outside its run).
# Not listed yet: the larger modules (log_manager, directory, coordinator/, remote/, cluster/: add
# each with its tests when an engine change touches it), offset_map (a re-export of the
# compiled map) and isolation (an Enum: mutmut finds no test reaching its methods).
declare -A MODULE_TESTS=(
  [abstract_index]="tests/unit/test_index.py tests/engine/test_log.py"
  [batch_planning]="tests/unit/test_batch_planning.py tests/engine/test_log.py"
  [checkpoint]="tests/engine/test_checkpoint.py"
  [cleaner]="tests/tools/test_compaction_fixtures.py tests/engine/test_cleaner.py --deselect=tests/engine/test_cleaner.py::test_a_crash_at_every_step_reopens_before_or_after tests/unit/test_log_cleaner.py tests/engine/test_transactions.py tests/engine/test_disk_faults.py --deselect=tests/engine/test_disk_faults.py::test_kfs_faults_arms_a_process_at_import"
  [clock]="tests/engine/test_log.py tests/engine/test_log_follow.py"
  [config]="tests/unit/test_log_config.py tests/engine/test_log.py tests/engine/test_directory.py"
  [damage]="tests/unit/test_damage.py tests/tools/test_repair.py tests/engine/test_log.py"
  [disk_calls]="tests/unit/test_disk_calls.py tests/engine/test_disk_faults.py --deselect=tests/engine/test_disk_faults.py::test_kfs_faults_arms_a_process_at_import tests/engine/test_checkpoint.py tests/unit/test_quarantine.py tests/engine/test_log.py"
  [dir_watch]="tests/engine/test_log_follow.py"
  [file_lock]="tests/unit/test_file_lock.py tests/engine/test_crash.py::test_a_second_writer_is_refused_and_readers_may_share"
  [leader_epoch_cache]="tests/engine/test_checkpoint.py tests/engine/test_log.py"
  [location]="tests/unit/test_location.py tests/engine/test_directory.py"
  [log]="tests/engine/test_log.py tests/unit/test_log_unified.py tests/engine/test_log_follow.py tests/engine/test_transactions.py --deselect=tests/engine/test_transactions.py::test_kfs_dump_of_a_kafka_snapshot_gives_kafka_dump_log_lines tests/engine/test_transaction_timeout.py tests/unit/test_log_retention.py tests/unit/test_log_cleaner.py tests/engine/test_disk_faults.py --deselect=tests/engine/test_disk_faults.py::test_kfs_faults_arms_a_process_at_import --deselect=tests/engine/test_disk_faults.py::test_a_refused_write_is_never_stored"
  [log_cleaner]="tests/unit/test_log_cleaner.py tests/engine/test_cleaner.py --deselect=tests/engine/test_cleaner.py::test_a_crash_at_every_step_reopens_before_or_after"
  [log_files]="tests/unit/test_log_files.py tests/engine/test_log.py"
  [log_loader]="tests/unit/test_log_loader.py tests/engine/test_crash.py --deselect=tests/engine/test_crash.py::test_kill9_loop_every_acknowledged_record_survives --deselect=tests/engine/test_crash.py::test_kill9_releases_the_lock tests/engine/test_log.py tests/engine/test_checkpoint.py tests/engine/test_log_follow.py"
  [log_reader]="tests/unit/test_log_reader.py tests/unit/test_columns.py tests/engine/test_log.py tests/engine/test_log_follow.py tests/engine/test_transactions.py --deselect=tests/engine/test_transactions.py::test_kfs_dump_of_a_kafka_snapshot_gives_kafka_dump_log_lines tests/engine/test_stream.py tests/engine/test_fixtures.py tests/engine/test_remote_log.py"
  [log_retention]="tests/unit/test_log_retention.py tests/tools/test_retention.py"
  [log_segments]="tests/engine/test_log_follow.py tests/engine/test_log.py"
  [offset_index]="tests/unit/test_index.py tests/engine/test_log.py"
  [open_files]="tests/unit/test_open_files.py tests/engine/test_pools.py tests/engine/test_log.py"
  [producer_state]="tests/unit/test_producer_state.py tests/engine/test_transactions.py tests/engine/test_log.py tests/engine/test_transaction_timeout.py"
  [quarantine]="tests/unit/test_quarantine.py tests/tools/test_repair.py"
  [read_committed]="tests/engine/test_transactions.py"
  [records/varint]="tests/unit/test_varint.py"
  [records/framing]="tests/unit/test_framing.py tests/unit/test_batch.py"
  [records/control]="tests/engine/test_transactions.py --deselect=tests/engine/test_transactions.py::test_kfs_dump_of_a_kafka_snapshot_gives_kafka_dump_log_lines"
  [records/record]="tests/unit/test_batch.py tests/unit/test_legacy.py"
  [records/batch]="tests/unit/test_batch.py tests/unit/test_columns.py"
  [records/columns]="tests/unit/test_columns.py tests/unit/test_stream_render.py tests/unit/test_log_reader.py"
  [records/compression]="tests/unit/test_compression.py --deselect=tests/unit/test_compression.py::test_a_declared_size_is_never_allocated tests/unit/test_batch.py"
  [records/legacy]="tests/unit/test_legacy.py tests/unit/test_batch.py"
  [record_cache]="tests/unit/test_record_cache.py tests/engine/test_log.py"
  [segment]="tests/unit/test_segment.py tests/unit/test_legacy.py tests/engine/test_log.py tests/engine/test_log_follow.py tests/unit/test_index.py tests/unit/test_log_reader.py tests/unit/test_log_loader.py tests/engine/test_transactions.py --deselect=tests/engine/test_transactions.py::test_kfs_dump_of_a_kafka_snapshot_gives_kafka_dump_log_lines"
  [segment_source]="tests/unit/test_segment_source.py tests/unit/test_batch_blocks.py tests/unit/test_open_files.py tests/unit/test_metadata_image.py tests/unit/test_remote_metadata.py tests/engine/test_log.py tests/engine/test_directory.py tests/engine/test_remote_log.py tests/engine/test_tiered_log.py"
  [salvage]="tests/unit/test_salvage.py tests/tools/test_repair.py tests/engine/test_log.py"
  [time_index]="tests/unit/test_index.py tests/engine/test_log.py"
  [topic_partition]="tests/unit/test_topic_partition.py tests/engine/test_log.py"
  [transaction_index]="tests/engine/test_transactions.py tests/engine/test_log.py"
)

if ! "$py" -c "import mutmut" 2>/dev/null; then
  echo "mutation: installing mutmut into .venv" >&2
  "$py" -m pip install -q "mutmut>=3.8,<4"
fi

modules=("$@")
[ ${#modules[@]} -gt 0 ] || mapfile -t modules < <(printf '%s\n' "${!MODULE_TESTS[@]}" | sort)
status=0
for module in "${modules[@]}"; do
  tests="${MODULE_TESTS[$module]:-}"
  if [ -z "$tests" ] || [ ! -f "$root/storage/$module.py" ]; then
    echo "mutation: no storage/$module.py with tests listed in scripts/mutation.sh" >&2
    exit 2
  fi
  copy="$work/$module"
  rm -rf "$copy"
  mkdir -p "$copy"
  # the sources, the compiled codec and the tests (fixtures linked: they are only read)
  (cd "$root" && tar -c --exclude=__pycache__ --exclude=tests/fixtures storage kfs tests pyproject.toml) \
    | tar -x -C "$copy"
  ln -s "$root/tests/fixtures" "$copy/tests/fixtures"
  {
    echo "[mutmut]"
    echo "source_paths = storage"
    echo "only_mutate = storage/$module.py"
    echo "also_copy ="
    echo "    kfs"
    echo "pytest_add_cli_args_test_selection ="
    for t in $tests; do echo "    $t"; done
    echo "pytest_add_cli_args ="
    echo "    -p"
    echo "    no:cacheprovider"
  } > "$copy/setup.cfg"
  echo "== storage/$module.py (tests: $tests)"
  (cd "$copy" && CI=true "${mutmut[@]}" run --max-children "$children" >"$copy/run.log" 2>&1) || {
    echo "mutation: mutmut failed on $module (see $copy/run.log)" >&2; status=1; continue; }
  (cd "$copy" && "${mutmut[@]}" results --all true) > "$copy/results.txt" 2>&1 || true
  (cd "$copy" && "$py" - "$py" results.txt "$module") <<'PY'
import re, subprocess, sys
py, results, module = sys.argv[1:]
rows = [re.match(r"\s*(\S+): (.+)", line) for line in open(results).read().splitlines()]
rows = [(m[1], m[2].strip()) for m in rows if m]
# a mutant that hangs or crashes the tests was noticed as much as one that fails them
noticed = {"killed", "timeout", "segfault", "caught by type check"}
killed = sum(state in noticed for _, state in rows)
print(f"{module}: {100 * killed / max(len(rows), 1):.0f}% ({killed} of {len(rows)} mutants killed)")
for name, state in rows:
    if state in noticed:
        continue
    # the survivor as its changed lines: "- original" / "+ mutant"
    diff = subprocess.run([py, "-m", "mutmut", "show", name], capture_output=True, text=True).stdout
    changed = [line for line in diff.splitlines()
               if line[:1] in "-+" and not line.startswith(("---", "+++"))]
    print(f"  {state}: {name.split('.')[-1]}")
    for line in changed:
        print(f"      {line[0]} {line[1:].strip()}")
PY
done
exit $status
