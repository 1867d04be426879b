"""Making a SparkSession, with errors a person can act on when Java or pyspark is missing.

The checks run before anything else is started (``danube-planner`` calls :func:`preflight` at
start-up), so a machine without Java gets one line saying what to install and exit code 1, not
a Py4J stack trace. Local masters keep everything on loopback: ``SPARK_LOCAL_IP`` and the
driver address are ``spark.driver_host`` (127.0.0.1 by default), the web UI is off, and the
shuffle uses a few partitions.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from danube_planner.config import SparkSettings

log = logging.getLogger(__name__)

#: Spark 4 runs on Java 17 or newer.
MIN_JAVA = 17
MIN_PYSPARK = (4, 0)
_INSTALL_JAVA = (
    "install Java 17 or newer (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and put `java` "
    "on PATH or set JAVA_HOME"
)
_ALTERNATIVE = "or run the planner with --engine python (no Spark)"


class SparkUnavailable(RuntimeError):
    """Spark cannot run here; the message says what to install or change."""


def find_java(env: Mapping[str, str] | None = None) -> str:
    """Path of the ``java`` Spark will use: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    environ = os.environ if env is None else env
    home = environ.get("JAVA_HOME", "")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise SparkUnavailable(
            f"JAVA_HOME is {home}, but {candidate} is not an executable java: fix JAVA_HOME or unset it, "
            f"or {_INSTALL_JAVA}; {_ALTERNATIVE}"
        )
    found = shutil.which("java", path=environ.get("PATH", os.defpath))
    if found is None:
        raise SparkUnavailable(
            f"Java was not found (no `java` on PATH, JAVA_HOME unset): the Spark engine needs it: "
            f"{_INSTALL_JAVA}; {_ALTERNATIVE}"
        )
    return found


def parse_java_version(text: str) -> int | None:
    """The major version in ``java -version`` output (``"17.0.15"`` -> 17, ``"1.8.0_392"`` -> 8)."""
    m = re.search(r'version "(?P<v>[0-9][0-9._]*)', text)
    if m is None:
        return None
    parts = m["v"].split(".")
    major = int(parts[0])
    if major == 1 and len(parts) > 1:
        return int(parts[1].split("_")[0] or 0)
    return major


def java_major(java: str, *, timeout_s: float = 30.0) -> int:
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkUnavailable(
            f"could not run {java} -version ({exc}): {_INSTALL_JAVA}; {_ALTERNATIVE}"
        ) from None
    major = parse_java_version(out.stderr + out.stdout)
    if major is None:
        raise SparkUnavailable(
            f"{java} -version did not say which version it is: {_INSTALL_JAVA}; {_ALTERNATIVE}"
        )
    return major


def check_pyspark() -> str:
    """The installed pyspark version; SparkUnavailable if it is missing or too old."""
    try:
        import pyspark
    except ImportError:
        raise SparkUnavailable(
            "pyspark is not installed: pip install 'pyspark>=4.0,<5' (part of the dev extra: "
            f"pip install -e '.[dev]'), {_ALTERNATIVE}"
        ) from None
    version = str(getattr(pyspark, "__version__", "0"))
    nums = tuple(int(x) for x in re.findall(r"[0-9]+", version)[:2])
    if nums < MIN_PYSPARK:
        raise SparkUnavailable(f"pyspark {version} is too old: pip install 'pyspark>=4.0,<5', {_ALTERNATIVE}")
    return version


def preflight(env: Mapping[str, str] | None = None) -> tuple[str, str, int]:
    """Check pyspark and Java before starting anything: (pyspark version, java path, java major)."""
    version = check_pyspark()
    java = find_java(env)
    major = java_major(java)
    if major < MIN_JAVA:
        raise SparkUnavailable(
            f"{java} is Java {major}, but Spark 4 needs Java {MIN_JAVA} or newer: {_INSTALL_JAVA}; {_ALTERNATIVE}"
        )
    return version, java, major


def is_local(master: str) -> bool:
    return master.startswith("local")


def session_conf(settings: SparkSettings) -> dict[str, str]:
    """Every setting the builder gets (pure; tested without Spark)."""
    conf = {
        "spark.ui.enabled": str(settings.ui_enabled).lower(),
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.driver.memory": settings.driver_memory,
        "spark.driver.host": settings.driver_host,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
    }
    if is_local(settings.master):
        conf["spark.driver.bindAddress"] = settings.driver_host
        # Adaptive execution re-plans every shuffle: worth it on big data, only latency here.
        conf["spark.sql.adaptive.enabled"] = "false"
    conf.update(settings.conf)
    return conf


def executor_python(settings: SparkSettings) -> str:
    """The interpreter the executors run: ``spark.python``, else this process's."""
    return settings.python or sys.executable


def create_session(settings: SparkSettings) -> Any:
    """A started SparkSession (blocking: seconds for the JVM to start; call from a thread)."""
    preflight()
    os.environ["SPARK_LOCAL_IP"] = settings.driver_host  # read by the JVM launched below
    # Read when the SparkContext starts; the executors start this Python for Python tasks.
    os.environ["PYSPARK_PYTHON"] = executor_python(settings)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one INFO line per gateway call otherwise
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j / JVM start-up failures: say what failed, not how
        raise SparkUnavailable(
            f"could not start Spark (master {settings.master}): {str(exc).strip().splitlines()[0]}"
        ) from exc
    spark.sparkContext.setLogLevel("WARN")
    got = spark.sparkContext.master
    if got != settings.master:
        # getOrCreate hands back a session this process already runs, whatever master it has.
        raise SparkUnavailable(
            f"a SparkSession on master {got} is already running in this process: stop it before "
            f"starting one on {settings.master}"
        )
    log.info("Spark session up (master %s, Spark %s)", settings.master, spark.version)
    return spark
