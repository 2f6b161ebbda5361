"""A GCS JSON API server as the tests' Google Cloud Storage: ``gcp-storage-emulator`` (PyPI,
a test dependency), in memory, on a free loopback port. It takes any request without
credentials, as the GCS emulators Aiven's plugin is tested against do; pyarrow's
``GcsFileSystem(anonymous=True, scheme="http", endpoint_override=...)`` reaches it, including
ranged reads. ``GcsServer.start()`` returns once it answers a listing of buckets; ``stop()``
(also on leaving ``with``) ends it, killed if it hangs. Nothing here is used by kfs itself."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .java_server import free_port

START_TIMEOUT_S = 60.0
PROJECT = "kfs-tests"


def gcs_emulator_missing() -> str | None:
    """Why the emulator cannot run here, or None."""
    try:
        import gcp_storage_emulator  # noqa: F401
    except ImportError:
        return "gcp-storage-emulator is not installed (scripts/setup.sh test)"
    return None


class GcsServer:
    """One emulator process; ``endpoint`` (``http://127.0.0.1:PORT``), ``filesystem()`` a
    ``pyarrow.fs.GcsFileSystem`` of it, ``new_bucket()`` a fresh, empty bucket,
    ``upload(directory, bucket)`` a local tree copied in as objects (paths below ``directory``
    their keys)."""

    _buckets = itertools.count()

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> GcsServer:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.work_dir / "gcs-emulator.out", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
             "--port", str(self.port), "--in-memory"],
            stdout=out, stderr=subprocess.STDOUT, cwd=self.work_dir)
        out.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the GCS emulator did not start: {self.log_tail()}")
            time.sleep(0.05)  # polling the condition: a listing answered
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b?project={PROJECT}",
                                        timeout=5) as response:
                return "kind" in json.load(response)
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def log_tail(self, lines: int = 20) -> str:
        path = self.work_dir / "gcs-emulator.out"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.GcsFileSystem(anonymous=True, scheme="http", project_id=PROJECT,
                                  endpoint_override=f"127.0.0.1:{self.port}")

    def new_bucket(self, stem: str = "bucket") -> str:
        name = f"{stem}-{next(self._buckets)}"
        self.filesystem().create_dir(name)
        return name

    def upload(self, directory: Path, bucket: str) -> None:
        fs = self.filesystem()
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            with fs.open_output_stream(f"{bucket}/{path.relative_to(directory).as_posix()}") as f:
                f.write(path.read_bytes())

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> GcsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
