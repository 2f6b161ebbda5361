#!/usr/bin/env bash
# One command to set up and run the test suite (what CI runs): scripts/test.sh [pytest args]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh" test
cd "$root"
exec .venv/bin/python -m pytest "$@"
