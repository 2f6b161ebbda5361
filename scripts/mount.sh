#!/usr/bin/env bash
# One command to try kfs: sets up what a fresh machine lacks, then mounts BACKING_DIR (default:
# this checkout's data/, created on first use) at MOUNTPOINT (default: this checkout's mnt/) in
# the background.
#   scripts/mount.sh [BACKING_DIR [MOUNTPOINT]] [kfs mount options, anywhere]
# Unmount with: fusermount3 -u MOUNTPOINT (or .venv/bin/kfs umount MOUNTPOINT, which waits for
# the logs to close)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"

dirs=(); opts=(); log=""; fg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; dirs+=("$@"); break ;;
    -h|--help) exec "$root/.venv/bin/kfs" mount --help ;;
    --log-file=*) log="${1#--log-file=}"; opts+=("$1") ;;
    --log-file) log="${2:?--log-file needs a PATH}"; opts+=("$1" "$2"); shift ;;
    # kfs mount's other options that take a value as the next argument
    --log-level|--key-separator|--isolation-level) opts+=("$1" "${2:?$1 needs a value}"); shift ;;
    -f|--foreground) fg=1; opts+=("$1") ;;
    -?*) opts+=("$1") ;;
    *) dirs+=("$1") ;;
  esac
  shift
done
[ ${#dirs[@]} -le 2 ] || { echo "usage: $0 [BACKING_DIR [MOUNTPOINT]] [kfs mount options]" >&2; exit 2; }
backing="${dirs[0]:-$root/data}"; mountpoint="${dirs[1]:-$root/mnt}"
# the checkout's own data/ is made on first use; a BACKING_DIR given must exist (or --create)
[ ${#dirs[@]} -gt 0 ] || [ -e "$backing" ] || opts+=(--create)
mkdir -p "$mountpoint" 2>/dev/null || true  # (a stale kfs mount fails here: kfs mount clears it)
kfs=("$root/.venv/bin/kfs" mount ${opts[@]+"${opts[@]}"} -- "$backing" "$mountpoint")
[ -z "$fg" ] || exec "${kfs[@]}"  # (serves until unmounted, logging to stderr)
"${kfs[@]}"
[ -n "$log" ] || log="$("$root/.venv/bin/python" -c 'import sys; from kfs.mount.daemon import default_log_file; print(default_log_file(sys.argv[1]))' "$mountpoint")"
echo "kfs: $backing mounted at $mountpoint (unmount: fusermount3 -u $mountpoint; log: $log)"
