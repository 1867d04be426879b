"""One local SparkSession for the Spark tests that ask for ``spark`` (Danube's data sources
registered), started on first use, shared by the modules and stopped at the end of the session.

Python workers must run this interpreter (the venv with pyarrow and the project), so
``PYSPARK_PYTHON`` is set before any JVM starts: at import of this file.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

#: Shared with the planner's tests (they ask for the same master).
MASTER = "local[2]"


def _session() -> Any:
    """The running SparkSession (another module's, e.g. the planner's, if it is still up), else a
    new one. Danube's data sources are registered on it."""
    from pyspark.sql import SparkSession

    from danube_spark import register

    active = SparkSession.getActiveSession()
    if active is not None and active.sparkContext._jsc is not None:
        register(active)
        return active
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
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    print(f"\nSparkSession ({MASTER}) up in {time.monotonic() - t0:.1f} s")
    return session


@pytest.fixture(scope="session")
def _spark_at_exit() -> Iterator[None]:
    yield
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


@pytest.fixture(scope="module")
def spark(_spark_at_exit: None) -> Any:
    """A SparkSession shared by every module (a module that stopped it gets it restarted)."""
    return _session()
