"""`cat big.jsonl >> mnt/orders-0/append` with a million lines: one record per line, nothing
lost or split, whatever the write sizes the kernel chooses."""

import json
import subprocess

from storage import LogManager

LINES = 1_000_000


def test_million_line_append_through_cat(mount, tmp_path):
    big = tmp_path / "big.jsonl"
    with open(big, "w") as f:
        for i in range(LINES):
            f.write(json.dumps({"i": i, "pad": "x" * (i % 50)}) + "\n")
    m = mount()
    subprocess.run(["mkdir", m.path / "orders-0"], check=True, timeout=30)
    subprocess.run(f"cat {big} >> {m.path}/orders-0/append", shell=True, check=True, timeout=240)
    end = subprocess.run(["getfattr", "--only-values", "-n", "user.kafka.logEndOffset",
                          m.path / "orders-0"], capture_output=True, check=True, timeout=120).stdout
    assert int(end) == LINES
    for offset in (0, 1, 4095, 123_457, LINES - 1):
        value = subprocess.run(["cat", m.path / "orders-0" / "by-offset" / str(offset)],
                               capture_output=True, check=True, timeout=120).stdout
        assert json.loads(value)["i"] == offset
    mount.unmount(m)

    mgr = LogManager(m.backing, read_only=True)
    log = mgr.get("orders-0")
    expected = big.read_bytes().split(b"\n")[:-1]
    got, offset = [], 0
    while chunk := log.reader.records_from(offset, 100_000):
        got.extend(r.value for r in chunk)
        offset = chunk[-1].offset + 1
    mgr.close()
    assert got == expected
