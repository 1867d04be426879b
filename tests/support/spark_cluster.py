"""A real Spark standalone cluster on loopback: one master and N workers, started from the pyspark
package (no Spark download), for tests (a session-scoped fixture) and bench scripts (a context
manager)::

    with standalone_cluster(workers=2) as cluster:
        spark = SparkSession.builder.master(cluster.master_url)...   # plus cluster.app_conf()

Each daemon is ``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.{master.Master,worker.Worker}``
(``SPARK_HOME`` = the pyspark package directory), bound to 127.0.0.1 on free ports, in its own
process group (the executors and Python workers it launches are in that group too), its output in
``<tmp>/logs/``, its executors' work directory under ``<tmp>/``. Start-up waits until the master's
JSON status page (``http://127.0.0.1:<webui>/json/``) lists every worker ``ALIVE``; shutdown
sends SIGTERM to each process group, then SIGKILL to what is left.

**What the executors run.** A PySpark driver tells the executors which Python to start (its
``PYSPARK_PYTHON``, read when the SparkContext starts; ``python3`` on the worker's PATH if unset):
the planner sets it from ``spark.python`` (default: its own interpreter). Here that is the
project's venv Python, and the project is installed in the venv in editable mode, so the
executors import ``danube_common`` and ``danube_planner`` from this checkout with nothing shipped.
A cluster on other machines needs the same: a Python with the project installed at the path the
driver names (or ``spark.submit.pyFiles`` / an archive of the packages: not done here).

Cheap on purpose (CI shares 2 cores): workers offer ``cores`` (1) and ``memory`` (1g) each, the
daemons' JVM heaps are 256 MB, and :meth:`StandaloneCluster.app_conf` asks for 512 MB executors
with one core.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from danube_common.etcd_server import free_port
from tests.support.spark_session import TEST_JVM_OPTIONS

HOST = "127.0.0.1"
#: Start-up of a master and its workers (two JVMs each: the launcher, then the daemon).
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0


class SparkClusterError(RuntimeError):
    """The cluster did not start; the message carries the tail of the daemons' logs."""


def spark_home() -> Path:
    """The pyspark package directory: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise SparkClusterError(f"{home} has no bin/spark-class: is pyspark installed from its wheel?")
    return home


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class StandaloneCluster:
    """A running master and its workers (see the module docstring)."""

    master_url: str
    web_url: str
    workers: int
    cores_per_worker: int
    worker_memory: str
    tmp: Path
    python: str = sys.executable
    _daemons: list[_Daemon] = field(default_factory=list, repr=False)

    @property
    def log_dir(self) -> Path:
        return self.tmp / "logs"

    @property
    def total_cores(self) -> int:
        return self.workers * self.cores_per_worker

    def app_conf(self, *, executor_memory: str = "512m") -> dict[str, str]:
        """Spark settings for an application on this cluster: one executor per worker, one core
        each (``spark.cores.max`` = every core the workers offer)."""
        return {
            "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
            "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
            "spark.executor.memory": executor_memory,
            "spark.executor.cores": str(self.cores_per_worker),
            "spark.cores.max": str(self.total_cores),
        }

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as resp:
            return dict(json.load(resp))

    def alive_workers(self) -> int:
        try:
            doc = self.status()
        except (OSError, ValueError):
            return 0  # not serving yet
        return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")

    def _dead(self) -> _Daemon | None:
        return next((d for d in self._daemons if d.proc.poll() is not None), None)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll the master until every worker is ALIVE; fail at once if a daemon exits."""
        deadline = time.monotonic() + timeout_s
        while True:
            dead = self._dead()
            if dead is not None:
                raise SparkClusterError(
                    f"the Spark {dead.name} exited with code {dead.proc.returncode} while the cluster "
                    f"was starting; its log ({dead.log_path}) ends with:\n{dead.tail()}"
                )
            alive = self.alive_workers()
            if alive >= self.workers:
                return
            if time.monotonic() >= deadline:
                logs = "\n".join(f"--- {d.name} ({d.log_path}):\n{d.tail(10)}" for d in self._daemons)
                raise SparkClusterError(
                    f"{alive} of {self.workers} Spark workers registered with {self.master_url} within "
                    f"{timeout_s:.0f} s:\n{logs}"
                )
            time.sleep(0.2)  # between two polls of the status page

    def stop(self) -> None:
        """SIGTERM every daemon's process group (workers first), then SIGKILL what is left."""
        for d in reversed(self._daemons):
            _signal_group(d.proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for d in reversed(self._daemons):
            try:
                d.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # Executors and Python workers live in the daemon's group and may outlast it.
            _signal_group(d.proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.proc.wait(timeout=5)
            d.log_file.close()
        self._daemons.clear()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _daemon_env(home: Path, tmp: Path, python: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    conf_dir = tmp / "conf"  # empty: no spark-defaults.conf or spark-env.sh of the machine
    conf_dir.mkdir(exist_ok=True)
    env.update(
        SPARK_HOME=str(home),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP=HOST,
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=TEST_JVM_OPTIONS,
        PYSPARK_PYTHON=python,
    )
    return env


def _spawn(name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> _Daemon:
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("wb")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    return _Daemon(name, proc, log_path, log_file)


def start_cluster(
    *,
    workers: int = 2,
    cores_per_worker: int = 1,
    worker_memory: str = "1g",
    tmp: Path | None = None,
    python: str = sys.executable,
) -> StandaloneCluster:
    """Start a master and ``workers`` workers; return once all are registered (call ``stop()``)."""
    from danube_planner.sparkenv import preflight

    preflight()  # pyspark and Java 17+, with a message that says what to install
    home = spark_home()
    own_tmp = tmp is None
    base = Path(tempfile.mkdtemp(prefix="danube-spark-")) if tmp is None else tmp
    (base / "logs").mkdir(parents=True, exist_ok=True)
    env = _daemon_env(home, base, python)
    spark_class = str(home / "bin" / "spark-class")
    port, ui_port = free_port(HOST), free_port(HOST)
    cluster = StandaloneCluster(
        master_url=f"spark://{HOST}:{port}",
        web_url=f"http://{HOST}:{ui_port}",
        workers=workers,
        cores_per_worker=cores_per_worker,
        worker_memory=worker_memory,
        tmp=base,
        python=python,
    )
    try:
        master = [spark_class, "org.apache.spark.deploy.master.Master"]
        master += ["--host", HOST, "--port", str(port), "--webui-port", str(ui_port)]
        cluster._daemons.append(_spawn("master", master, env, cluster.log_dir))
        for i in range(workers):
            work = base / f"work-{i}"
            work.mkdir(exist_ok=True)
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master_url]
            argv += ["--host", HOST, "--webui-port", str(free_port(HOST)), "--cores", str(cores_per_worker)]
            argv += ["--memory", worker_memory, "--work-dir", str(work)]
            cluster._daemons.append(_spawn(f"worker-{i}", argv, env, cluster.log_dir))
        cluster.wait_ready()
    except BaseException:
        cluster.stop()
        if own_tmp:
            shutil.rmtree(base, ignore_errors=True)
        raise
    return cluster


@contextlib.contextmanager
def standalone_cluster(
    *,
    workers: int = 2,
    cores_per_worker: int = 1,
    worker_memory: str = "1g",
    keep_logs: bool = False,
) -> Iterator[StandaloneCluster]:
    """A started cluster for the ``with`` block; its temp dir (logs included) is removed at the
    end unless ``keep_logs``."""
    base = Path(tempfile.mkdtemp(prefix="danube-spark-"))
    try:
        cluster = start_cluster(
            workers=workers, cores_per_worker=cores_per_worker, worker_memory=worker_memory, tmp=base
        )
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        if not keep_logs:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """One standalone cluster (master + 2 workers, 1 core and 1g each) for the whole test session.
    Its logs stay in pytest's temp dir (``<basetemp>/spark-standalone*/logs``)."""
    try:
        cluster = start_cluster(tmp=tmp_path_factory.mktemp("spark-standalone"))
    except Exception as exc:
        pytest.fail(f"could not start the Spark standalone cluster: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
