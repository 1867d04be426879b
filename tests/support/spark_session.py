"""The JVM's current SparkSession, kept honest for tests that share one Python process.

A JVM holds one *default* SparkSession (global) and one *active* session per thread (an
inheritable thread-local); PySpark mirrors them in ``SparkSession._instantiatedSession`` /
``_activeSession``. Each py4j call from a Python thread runs on a JVM thread of its own, so
stopping a session from one Python thread leaves it "active" for the others, and a streaming
write started from a thread whose active session is a stopped one fails (its sink is looked up
there). The fixtures therefore make their session active and default on the thread that uses
it (:func:`activate`), and clear both when they stop it or are done with it (:func:`release`).
"""

from __future__ import annotations

from typing import Any

#: JVM options of every test JVM (driver, standalone daemons, executors): the C1 compiler only
#: and the serial collector. The tests' jobs are small and their JVMs short-lived on 2 cores,
#: where C2's compile threads and the parallel collector's threads compete with the work itself.
#: Measured on this 2-core machine (29 Nov 2026, noisy): ``tests/spark`` took 108-128 s with
#: these (three runs) against 133 s without; the standalone test's set-up 33-48 s against 57-63 s.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def alive(session: Any) -> bool:
    """Whether ``session``'s SparkContext runs (PySpark may not know the JVM stopped it)."""
    jsc = session.sparkContext._jsc
    if jsc is None:
        return False
    try:
        return not jsc.sc().isStopped()
    except Exception:  # the gateway is gone: nothing runs
        return False


def activate(session: Any) -> None:
    """Make ``session`` the JVM's default and this thread's active session (both sides)."""
    from pyspark.sql import SparkSession

    jvm = session._jvm.SparkSession
    jvm.setDefaultSession(session._jsparkSession)
    jvm.setActiveSession(session._jsparkSession)
    SparkSession._instantiatedSession = session
    SparkSession._activeSession = session


def release(session: Any | None = None) -> None:
    """Clear the JVM's default and this thread's active session if they are ``session`` (any
    session if None) or a stopped one; PySpark's records of them likewise."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    for attr in ("_instantiatedSession", "_activeSession"):
        held = getattr(SparkSession, attr)
        if held is not None and (session is None or held is session or not alive(held)):
            setattr(SparkSession, attr, None)
    sc = SparkContext._active_spark_context
    if sc is None or sc._jvm is None:
        return
    jvm = sc._jvm.SparkSession
    mine = None if session is None else session._jsparkSession
    for get, clear in (
        (jvm.getDefaultSession, jvm.clearDefaultSession),
        (jvm.getActiveSession, jvm.clearActiveSession),
    ):
        held = get()
        if held.isDefined():
            j = held.get()
            if mine is None or j.equals(mine) or j.sparkContext().isStopped():
                clear()


def stop(session: Any) -> None:
    """Stop ``session`` and clear it as the default and this thread's active session."""
    from pyspark.sql import SparkSession

    jvm = session._jvm
    session.stop()  # clears them on the thread that stops it, and PySpark's records
    if jvm is not None:
        jvm.SparkSession.clearDefaultSession()
        jvm.SparkSession.clearActiveSession()
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
