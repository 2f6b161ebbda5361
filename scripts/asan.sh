#!/usr/bin/env bash
# The test suite against an AddressSanitizer build of the compiled codec:
#   scripts/asan.sh [pytest args]
#
# Copies the checkout's sources and tests (what git tracks or would track; not .venv or build/)
# into the scratch directory $KFS_ASAN_DIR (default /tmp/kfs-asan, emptied first), fixtures
# included (tests/fixtures), so the in-place build stays as it is; builds
# storage/records/_c/*.pyx and kfs/spark/_*.pyx there with gcc and KFS_SANITIZE=address; runs pytest there.
#
# Python is not built with ASan, so gcc's libasan is preloaded, into Python processes only: a
# sitecustomize re-executes each Python (the CLI, the mount daemon, Spark's workers) with it
# and takes it out of the environment of what Python starts (ps hangs and dd aborts under a
# preloaded libasan, and Spark's launch scripts use ps). PYTHONMALLOC=malloc makes every Python
# object its own guarded allocation. Leak detection is off: CPython keeps memory to exit.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
base="${KFS_ASAN_DIR:-/tmp/kfs-asan}"
dir="$base/$(basename "$root")"
py="$root/.venv/bin/python"

rm -rf "$base" && mkdir -p "$dir"
cd "$root"
git ls-files -co --exclude-standard | while IFS= read -r f; do [ -e "$f" ] && echo "$f"; done \
  | tar -cf - -T - | tar -C "$dir" -xf -
cd "$dir"
if ! CC=gcc LDSHARED="gcc -shared" KFS_SANITIZE=address "$py" setup.py -q build_ext --inplace \
    >build-asan.log 2>&1; then
  cat build-asan.log >&2
  exit 2
fi
for so in storage/records/_c/*.so kfs/spark/_*.so; do
  if ! ldd "$so" | grep libasan >/dev/null; then
    echo "asan: $so is not linked with libasan" >&2
    exit 2
  fi
done
echo "asan: $dir/storage/records/_c/*.so and $dir/kfs/spark/_*.so built with AddressSanitizer" >&2

cat >sitecustomize.py <<'EOF'
"""scripts/asan.sh: every Python process runs with libasan preloaded, nothing else does."""
import os
import sys

_libasan = os.environ.get("KFS_ASAN_PRELOAD")
if _libasan and os.environ.get("LD_PRELOAD") != _libasan:
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]],
              {**os.environ, "LD_PRELOAD": _libasan})
os.environ.pop("LD_PRELOAD", None)
EOF
export KFS_ASAN_PRELOAD="$(gcc -print-file-name=libasan.so)"
export LD_PRELOAD="$KFS_ASAN_PRELOAD" PYTHONPATH="$dir" PYTHONMALLOC=malloc
export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}"
"$py" -c "import storage.records._c.scan as c; assert c.__file__.startswith('$dir/'), c.__file__"
exec "$py" -m pytest -p no:cacheprovider "$@"
