"""A Spark standalone cluster on loopback, as the tests' cluster: a master and workers as
separate processes (``spark-class org.apache.spark.deploy.master.Master`` / ``…worker.Worker``
of the installed pyspark), each worker with its own work directory, one core and a little
memory, and a SparkSession submitted to it the way docs/spark.md tells a user
(``master("spark://127.0.0.1:PORT")``, the executors' Python in ``PYSPARK_PYTHON``, their
PYTHONPATH in ``spark.executorEnv.PYTHONPATH``).

* ``SparkStandalone(root)``: the processes; ``start()`` returns once the master's JSON status
  (``http://127.0.0.1:W/json/``) lists every worker ALIVE, ``stop()`` ends their process groups
  (SIGTERM, SIGKILL after a deadline), ``logs()`` is the tail of each one's log;
* ``cluster_session(standalone)``: a SparkSession of that master, once an executor of every
  worker registered with it;
* ``SparkCluster``: what the ``spark_cluster`` fixture (conftest) yields: ``session``, the
  standalone processes, and ``tasks_by_executor(action)``: the tasks each executor ran for the
  jobs ``action`` started, from Spark's monitoring REST API on the driver.

The daemons get no PYTHONPATH, PYSPARK_PYTHON or SPARK_* of the test's environment: what the
executors run and import comes from the application (the driver's PYSPARK_PYTHON, its conf), as
on a real cluster.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, TypeVar

from .kafka import free_port
from .kfs import kfs_env
from .paths import REPO
from .waits import Deadline, wait_until

T = TypeVar("T")

START_TIMEOUT_S = 180.0  # JVMs on a loaded 2-core machine: tens of seconds, not minutes
STOP_TIMEOUT_S = 30.0  # a daemon's clean stop, then SIGKILL
DAEMON_MEMORY = "256m"  # the master's and each worker's own heap (SPARK_DAEMON_MEMORY)
WORKER_MEMORY = "1g"  # what a worker offers its executors (--memory)
EXECUTOR_MEMORY = "512m"  # spark.executor.memory: fits a worker's --memory
# the JIT's first tier only, serial GC: less CPU for short-lived JVMs on a 2-core machine
DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"  # the master's and workers'
EXECUTOR_JAVA_OPTS = DAEMON_JAVA_OPTS  # spark.executor.extraJavaOptions


def spark_home() -> Path:
    """The installed pyspark package: a Spark distribution (``bin/spark-class``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_class() -> Path:
    return spark_home() / "bin" / "spark-class"


def get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def _answer(url: str):
    """The JSON at ``url``, or None while nothing answers there yet."""
    try:
        return get_json(url)
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


class Daemon:
    """One ``spark-class`` process in its own process group, its output in ``log``."""

    def __init__(self, name: str, log: Path, args: list[str], env: dict[str, str]) -> None:
        self.name, self.log = name, log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([str(spark_class()), *args], stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)

    def running(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # spark-class execs java: the group holds the JVM
        except ProcessLookupError:
            pass

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError as e:
            text = [f"(no log: {e})"]
        status = "running" if self.running() else f"exited {self.proc.returncode}"
        return f"----- {self.name} ({status}) {self.log} -----\n" + "\n".join(text)


class SparkStandalone:
    """A master and ``workers`` workers under ``root`` (their logs, work and local
    directories, and an empty SPARK_CONF_DIR so no user config applies)."""

    def __init__(self, root: Path, workers: int = 2, worker_memory: str = WORKER_MEMORY) -> None:
        self.root = Path(root)
        self.worker_count, self.worker_memory = workers, worker_memory
        self.port, self.web_port = free_port(), free_port()
        self.worker_web_ports = [free_port() for _ in range(workers)]
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []
        self.start_seconds: float | None = None

    @property
    def url(self) -> str:
        """The master's URL, as a driver or ``spark-submit --master`` takes it."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def work_dir(self, n: int) -> Path:
        return self.root / f"worker{n}" / "work"

    def worker_web_url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.worker_web_ports[n]}"

    def _env(self, local_dirs: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
               and not k.startswith("SPARK_")}
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        env.update(SPARK_HOME=str(spark_home()), SPARK_CONF_DIR=str(conf),
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
                   # a port taken meanwhile (free_port is a guess): the daemon exits, and the
                   # wait says so with its log, instead of it serving on the next port
                   SPARK_DAEMON_JAVA_OPTS=f"{DAEMON_JAVA_OPTS} -Dspark.port.maxRetries=0",
                   # no REST submission server (port 6066) nor its clash with another cluster
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        if local_dirs is not None:
            local_dirs.mkdir(parents=True, exist_ok=True)
            env["SPARK_LOCAL_DIRS"] = str(local_dirs)
        return env

    def status(self) -> dict | None:
        """The master's state as its web UI's ``/json/`` gives it (None: not answering)."""
        return _answer(f"{self.web_url}/json/")

    def alive_workers(self) -> list[dict]:
        status = self.status() or {}
        return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]

    def start(self) -> "SparkStandalone":
        began = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self.master = Daemon("master", self.root / "master.log",
                             ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", str(self.port), "--webui-port", str(self.web_port)],
                             self._env())
        # the workers only once it serves: a worker that finds no master retries after ~5 s
        self._wait(lambda: (self.status() or {}).get("status") == "ALIVE", "the master ALIVE")
        for n in range(self.worker_count):
            self.work_dir(n).mkdir(parents=True, exist_ok=True)
            self.workers.append(Daemon(
                f"worker{n}", self.root / f"worker{n}" / "worker.log",
                ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                 "--work-dir", str(self.work_dir(n)), "--cores", "1",
                 "--memory", self.worker_memory, "--webui-port", str(self.worker_web_ports[n])],
                self._env(self.root / f"worker{n}" / "local")))
        self._wait(lambda: len(self.alive_workers()) >= self.worker_count,
                   f"{self.worker_count} ALIVE workers in the master's status")
        self.start_seconds = time.monotonic() - began
        return self

    def _wait(self, condition: Callable[[], object], what: str) -> None:
        deadline = Deadline(START_TIMEOUT_S, what)
        while not condition():
            dead = [d for d in (self.master, *self.workers) if d is not None and not d.running()]
            if dead:
                raise RuntimeError(f"waiting for {what}: {dead[0].name} exited\n{self.logs()}")
            if deadline.passed():
                raise TimeoutError(f"timed out after {START_TIMEOUT_S:g} s waiting for {what}\n"
                                   f"{self.logs()}")
            time.sleep(0.1)

    def worker_executors(self) -> dict[str, int]:
        """``{"<app id>/<executor id>": worker number}`` of the executors each worker's own
        status (its web UI's ``/json/``) says it runs or ran."""
        out = {}
        for n in range(len(self.workers)):
            status = _answer(f"{self.worker_web_url(n)}/json/") or {}
            for e in status.get("executors", []) + status.get("finishedexecutors", []):
                out[f"{e['appid']}/{e['id']}"] = n
        return out

    def stop(self) -> None:
        """SIGTERM to every process group (workers first), SIGKILL to those left after
        STOP_TIMEOUT_S. Never raises for a daemon already gone."""
        daemons = [*self.workers, *([self.master] if self.master else [])]
        for d in daemons:
            d.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for d in daemons:
            try:
                d.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            d.signal(signal.SIGKILL)  # the group: an executor JVM a worker left behind too
            d.proc.wait(30)

    def logs(self, lines: int = 40) -> str:
        daemons = [*([self.master] if self.master else []), *self.workers]
        texts = [d.tail(lines) for d in daemons]
        for n in range(len(self.workers)):  # executors' stderr: <work dir>/<app>/<executor>/
            for stderr in sorted(self.work_dir(n).glob("*/*/stderr"))[-2:]:
                tail = stderr.read_text(errors="replace").splitlines()[-lines:]
                texts.append(f"----- executor {stderr.parent.relative_to(self.root)} -----\n"
                             + "\n".join(tail))
        return "\n".join(texts)


def cluster_session(standalone: SparkStandalone, app_name: str = "kfs-cluster-tests",
                    conf: dict[str, str] | None = None):
    """A SparkSession of ``standalone``'s master (one executor of one core per worker), once
    every worker's executor registered with the driver. The executors run this interpreter
    (``PYSPARK_PYTHON``) and import this checkout (``spark.executorEnv.PYTHONPATH``); the
    driver's web UI (for its REST API) listens on a free loopback port. ``conf``: more
    settings of the build (``spark.executorEnv.AWS_…``)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        raise RuntimeError("a SparkContext is already running in this process (one per process): "
                           "the spark and spark_cluster fixtures cannot share a test module")
    # The executors' Python: a source registered from Python takes it from PYSPARK_PYTHON when
    # the SparkContext starts, Spark's own lookup of format("kfs") (pyspark_kfs) from the driver
    # JVM's environment, which spark-submit's --conf spark.pyspark.python does not set (seen:
    # the executors ran "python3" from their PATH)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # as the spark fixture: a driver JVM this session starts serves the later modules' too
    os.environ["PYTHONPATH"] = kfs_env()["PYTHONPATH"]
    builder = (
        SparkSession.builder.master(standalone.url)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", EXECUTOR_MEMORY)
        .config("spark.executor.extraJavaOptions", EXECUTOR_JAVA_OPTS)
        .config("spark.cores.max", str(standalone.worker_count))
        .config("spark.executorEnv.PYTHONPATH", str(REPO))
        .config("spark.ui.enabled", "true")  # its REST API: the tasks each executor ran
        .config("spark.ui.port", "0")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        session.sparkContext.setLogLevel("ERROR")
        if session._jvm.java.lang.System.getenv("PYSPARK_PYTHON") != sys.executable:
            # a JVM started earlier without it: the lookup's executors would run "python3"
            import kfs.spark

            kfs.spark.register(session, filter_pushdown=False)
        tracker = session.sparkContext.statusTracker()
        # getExecutorInfos lists the driver too
        deadline = Deadline(START_TIMEOUT_S, f"{standalone.worker_count} executors registered")
        while len(tracker.getExecutorInfos()) < standalone.worker_count + 1:
            if deadline.passed():
                raise TimeoutError(f"timed out after {START_TIMEOUT_S:g} s waiting for "
                                   f"{standalone.worker_count} executors to register\n"
                                   f"{standalone.logs()}")
            time.sleep(0.1)
    except BaseException:
        session.stop()
        raise
    return session


class SparkCluster:
    """What the ``spark_cluster`` fixture yields: ``session`` (a SparkSession of
    ``standalone``'s master) and the count of tasks each executor ran."""

    def __init__(self, session, standalone: SparkStandalone, start_seconds: float) -> None:
        self.session = session
        self.standalone = standalone
        self.start_seconds = start_seconds  # the session's start, executors registered

    @property
    def app_id(self) -> str:
        return self.session.sparkContext.applicationId

    def _api(self, path: str):
        return get_json(f"{self.session.sparkContext.uiWebUrl}/api/v1/applications/"
                        f"{self.app_id}/{path}", timeout=30)

    def tasks_by_executor(self, action: Callable[[], T]) -> tuple[T, dict[str, int]]:
        """``(action(), {executor id: tasks it ran successfully})`` for the Spark jobs
        ``action`` started on this thread (a job group of its own). Every job is waited for
        until the driver's status store has it ended (Spark's listener bus is asynchronous),
        then each of its stages' tasks are read from the monitoring REST API
        (``/api/v1/applications/<app>/stages/<stage>?details=true``: every attempt's tasks with
        their ``executorId`` and ``status``)."""
        sc = self.session.sparkContext
        group = f"kfs-tasks-{uuid.uuid4().hex}"
        sc.setJobGroup(group, "tasks counted by executor")
        try:
            result = action()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
        tracker = sc.statusTracker()
        job_ids = tracker.getJobIdsForGroup(group)
        assert job_ids, "the action started no Spark job"

        def ended():
            infos = [tracker.getJobInfo(j) for j in job_ids]
            return all(i is not None and i.status in ("SUCCEEDED", "FAILED") for i in infos) and infos

        infos = wait_until(ended, f"the end of jobs {job_ids} in the driver's status store")
        counts: collections.Counter[str] = collections.Counter()
        for stage_id in sorted({s for info in infos for s in info.stageIds}):
            try:
                attempts = self._api(f"stages/{stage_id}?details=true")
            except urllib.error.HTTPError as e:  # a stage skipped (its output reused): none ran
                if e.code == 404:
                    continue
                raise
            for attempt in attempts:
                for task in (attempt.get("tasks") or {}).values():
                    if task.get("status") == "SUCCESS":
                        counts[task["executorId"]] += 1
        return result, dict(counts)

    def executor_workers(self) -> dict[str, int]:
        """``{executor id: worker number}`` of this application's executors, from the
        workers' own status."""
        prefix = f"{self.app_id}/"
        return {key[len(prefix):]: n for key, n in self.standalone.worker_executors().items()
                if key.startswith(prefix)}
