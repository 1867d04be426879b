"""danube-planner's start-up: flags and config, and clear errors when Spark cannot run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from danube_planner import __main__ as cli
from danube_planner import sparkenv
from danube_planner.config import SparkSettings
from danube_planner.sparkenv import SparkUnavailable, find_java, parse_java_version, preflight, session_conf

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

ONCE = ["--once", "--leader-endpoints", ""]


def test_pyspark_missing_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # `import pyspark` raises ImportError
    assert cli.main(ONCE) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: pyspark is not installed: pip install 'pyspark>=4.0,<5'")
    assert "--engine python" in err and "Traceback" not in err


def test_java_missing_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no java
    assert cli.main(ONCE) == 1
    err = capsys.readouterr().err
    assert "Java was not found" in err and "openjdk-17-jre-headless" in err and "JAVA_HOME" in err
    assert "Traceback" not in err


def test_bad_java_home_is_named(tmp_path: Path) -> None:
    with pytest.raises(SparkUnavailable, match=f"JAVA_HOME is {tmp_path}"):
        find_java({"JAVA_HOME": str(tmp_path), "PATH": ""})


def test_old_java_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sparkenv, "find_java", lambda env=None: "/opt/java8/bin/java")
    monkeypatch.setattr(sparkenv, "java_major", lambda java: 8)
    with pytest.raises(SparkUnavailable, match="Java 8, but Spark 4 needs Java 17 or newer"):
        preflight()


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ("no version here", None),
    ],
)
def test_parse_java_version(text: str, major: int | None) -> None:
    assert parse_java_version(text) == major


def test_python_engine_needs_neither(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    ran = []
    monkeypatch.setattr(cli, "run_main", lambda main, **kw: ran.append(kw) or 0)
    monkeypatch.setattr(cli, "setup_logging", lambda *a, **kw: None)  # keep pytest's handlers
    assert cli.main([*ONCE, "--engine", "python"]) == 0
    assert ran


def test_session_settings_keep_local_runs_on_loopback() -> None:
    local = session_conf(SparkSettings())
    assert local["spark.ui.enabled"] == "false"
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    assert local["spark.sql.shuffle.partitions"] == "2"
    remote = session_conf(
        SparkSettings(
            master="spark://10.0.0.9:7077", driver_host="10.0.0.2", conf={"spark.executor.memory": "2g"}
        )
    )
    assert "spark.driver.bindAddress" not in remote
    assert remote["spark.driver.host"] == "10.0.0.2" and remote["spark.executor.memory"] == "2g"


def test_the_executors_run_the_planners_python_unless_told_otherwise() -> None:
    assert sparkenv.executor_python(SparkSettings()) == sys.executable
    assert (
        sparkenv.executor_python(SparkSettings(python="/opt/danube/bin/python")) == "/opt/danube/bin/python"
    )
    assert SparkSettings().history_on_executors is True and SparkSettings().history_partitions == 0


@pytest.mark.parametrize(
    "master", ["local", "local[*]", "local[4]", "spark://h:7077", "yarn", "k8s://https://h:6443"]
)
def test_masters_accepted(master: str) -> None:
    assert SparkSettings(master=master).master == master


def test_flags_reach_the_config(tmp_path: Path) -> None:
    cfg, once = cli.load(
        [
            "--once",
            "--master",
            "spark://10.0.0.9:7077",
            "--leader-endpoints",
            "",
            "--history-dir",
            str(tmp_path),
            "--max-moves",
            "3",
            "--target-cv",
            "0.2",
            "--engine",
            "python",
        ],
        env={"DANUBE_PLANNER_INTERVAL_S": "5"},
    )
    assert once and cfg.leader_endpoints == [] and cfg.engine == "python"
    assert cfg.spark.master == "spark://10.0.0.9:7077" and cfg.object_store.local_dir == str(tmp_path)
    assert (cfg.max_moves_per_cycle, cfg.target_cv, cfg.interval_s) == (3, 0.2, 5.0)


def test_bad_config_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--leader-endpoints", ""]) == 2  # continuous mode needs a leader service
    assert "--once" in capsys.readouterr().err
    assert cli.main(["--master", "nonsense"]) == 2
    assert "invalid Spark master" in capsys.readouterr().err
