#!/usr/bin/env bash
# One command to try kfs: sets up what a fresh machine lacks, then mounts BACKING_DIR
# (default ./data) at MOUNTPOINT (default ./mnt) in the background.
#   scripts/mount.sh [BACKING_DIR [MOUNTPOINT]] [kfs mount options...]
# Unmount with: fusermount3 -u MOUNTPOINT
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"

backing="./data"; mountpoint="./mnt"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then backing="$1"; shift; fi
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then mountpoint="$1"; shift; fi
mkdir -p "$backing" "$mountpoint"
"$root/.venv/bin/kfs" mount "$@" "$backing" "$mountpoint"
echo "kfs: $backing mounted at $mountpoint (unmount: fusermount3 -u $mountpoint)"
