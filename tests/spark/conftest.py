"""One local SparkSession for the Spark tests that ask for ``spark`` (Danube's data sources
registered), started on first use, shared by the modules and stopped at the end of the session;
and one local Danube cluster (etcd, lookup, a broker) for the modules that stream topics.

Python workers must run this interpreter (the venv with pyarrow and the project), so
``PYSPARK_PYTHON`` is set before any JVM starts: at import of this file.

A process runs one SparkContext: a module that needs another one (the standalone cluster's)
asks for ``no_local_spark`` first, which stops the shared session; the next module asking for
``spark`` gets a new one. Whoever holds a session makes it the JVM's active and default one
while it uses it and clears both when done (``tests/support/spark_session.py``), so a module
never picks up a session another module stopped.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from danube_local.cluster import LocalCluster
from tests.support import spark_session as ss

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

#: Shared with the planner's tests (they ask for the same master).
MASTER = "local[2]"

#: The shared local session while it runs (None: not started, or stopped).
_shared: Any = None


def _session() -> Any:
    """The shared local SparkSession, (re)started if it is not running, made the JVM's active
    and default session on this thread, with Danube's data sources registered."""
    global _shared
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from danube_spark import register

    if _shared is not None and ss.alive(_shared):
        ss.activate(_shared)  # Danube's data sources are registered on it already
        return _shared
    _shared = None
    # Whatever else runs or is remembered is not ours: stop it (one SparkContext per process)
    # and forget sessions that were stopped behind PySpark's back.
    for other in (SparkSession.getActiveSession(), SparkSession._instantiatedSession):
        if other is not None and ss.alive(other):
            ss.stop(other)
    sc = SparkContext._active_spark_context
    if sc is not None and sc._jsc is not None and sc._jsc.sc().isStopped():
        sc.stop()  # the JVM stopped it; PySpark would hand it back
    ss.release()
    t0 = time.monotonic()
    session = (
        SparkSession.builder.master(MASTER)
        .appName("danube-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", ss.TEST_JVM_OPTIONS)
        .getOrCreate()
    )
    if session.sparkContext.master != MASTER:
        raise RuntimeError(f"a SparkSession on {session.sparkContext.master} is still running")
    session.sparkContext.setLogLevel("ERROR")
    ss.activate(session)
    register(session)
    print(f"\nSparkSession ({MASTER}) up in {time.monotonic() - t0:.1f} s")
    _shared = session
    return session


def stop_shared_session() -> None:
    """Stop the shared local session, if it runs (another SparkContext is about to start)."""
    global _shared
    if _shared is not None:
        ss.stop(_shared)
        _shared = None
    ss.release()


@pytest.fixture(scope="session")
def _spark_at_exit() -> Iterator[None]:
    yield
    stop_shared_session()


@pytest.fixture(scope="module")
def spark(_spark_at_exit: None) -> Iterator[Any]:
    """The shared local SparkSession (a module that stopped it gets it restarted); it is this
    thread's active and default session during the module, and neither after."""
    yield _session()
    if _shared is not None and ss.alive(_shared):  # the module may have had it replaced
        ss.release(_shared)


@pytest.fixture(scope="module")
def no_local_spark(_spark_at_exit: None) -> None:
    """For a module that starts a SparkContext of its own: the shared one is stopped first."""
    stop_shared_session()


@pytest.fixture(scope="session")
def danube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local Danube cluster (etcd, lookup, one broker as processes) for the streaming tests;
    each test uses topics of its own."""
    c = LocalCluster(brokers=1, workdir=tmp_path_factory.mktemp("stream-cluster"), log_level="WARNING")
    c.start(timeout_s=60)
    try:
        yield c
    finally:
        c.stop()
