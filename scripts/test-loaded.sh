#!/usr/bin/env bash
# The test suite on a loaded machine: every core kept busy by stress-ng (installed from Debian
# when missing) while scripts/test.sh runs; pytest args pass through. Tests must wait on events
# and conditions, never on the clock, so this passes as the idle run does.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v stress-ng >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq stress-ng >/dev/null
fi
stress-ng --cpu "$(nproc)" --cpu-load 100 --quiet &
stress=$!
trap 'kill "$stress" 2>/dev/null; wait "$stress" 2>/dev/null || true' EXIT
"$root/scripts/test.sh" "$@"
