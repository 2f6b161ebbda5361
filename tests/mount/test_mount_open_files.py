"""A directory of many segments through a mount held to a small descriptor limit: .log files
are opened when read and closed when idle (storage.open_files), so every record reads and the
serving process never holds more than the pool's bound."""

from __future__ import annotations

import os
import subprocess

from storage import LogConfig
from storage.log import Log

POOL = 8  # KFS_OPEN_FILES for the mount: far below the segments read
NOFILE = 48  # the serving process's RLIMIT_NOFILE: FUSE, trio and the pool fit, 120 .logs do not


def test_many_segments_read_within_a_small_descriptor_limit(tmp_path, mount, monkeypatch):
    backing = tmp_path / "data"
    for p in range(30):
        (backing / f"t-{p}").mkdir(parents=True)
        log = Log(backing / f"t-{p}", "t", p, LogConfig())
        for s in range(4):
            log.append([b"p%d-s%d-%d" % (p, s, i) for i in range(3)])
            if s < 3:
                log.roll()
        log.close()
    monkeypatch.setenv("KFS_OPEN_FILES", str(POOL))
    m = mount(backing, "--read-only")
    subprocess.run(["prlimit", f"--pid={m.pid}", f"--nofile={NOFILE}:{NOFILE}"], check=True, timeout=30)
    for p in range(30):
        lines = (m.path / f"t-{p}" / "values").read_text().splitlines()
        assert lines == [f"p{p}-s{s}-{i}" for s in range(4) for i in range(3)]
        assert (m.path / f"t-{p}" / "by-offset" / "0").read_bytes() == b"p%d-s0-0" % p
    targets = [os.readlink(f"/proc/{m.pid}/fd/{f}") for f in os.listdir(f"/proc/{m.pid}/fd")]
    logs = [t for t in targets if t.startswith(str(backing)) and t.endswith(".log")]
    assert 0 < len(logs) <= POOL, logs
    assert "Too many open files" not in m.log_text()
