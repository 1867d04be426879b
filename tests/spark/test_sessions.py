"""The shared local SparkSession of tests/spark/conftest.py is replaced, not handed out again,
when it was stopped behind the fixture's back: by the JVM alone (PySpark still holds the
context) or from another Python thread (another JVM thread: this thread's active session is
left pointing at the stopped one). The new session is this thread's active and the JVM's
default one, with Danube's data sources registered."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.spark.conftest import _session
from tests.support import spark_session as ss

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def check_current(session: Any) -> None:
    jvm = session._jvm.SparkSession
    assert ss.alive(session)
    assert jvm.getActiveSession().get().equals(session._jsparkSession)
    assert jvm.getDefaultSession().get().equals(session._jsparkSession)
    sources = session._jsparkSession.sessionState().dataSourceManager()
    assert sources.dataSourceExists("danube") and sources.dataSourceExists("danube-history")
    assert session.range(3).count() == 3


def test_a_stopped_shared_session_is_replaced(spark: Any) -> None:
    check_current(spark)
    assert _session() is spark  # running: the same one

    spark.sparkContext._jsc.sc().stop()  # the JVM stops it; PySpark does not know
    assert spark.sparkContext._jsc is not None and not ss.alive(spark)
    second = _session()
    assert second is not spark
    check_current(second)

    stopper = threading.Thread(target=second.stop)  # stopped from another thread
    stopper.start()
    stopper.join(timeout=60)
    third = _session()
    assert third is not second
    check_current(third)
