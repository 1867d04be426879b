"""danube-local's command line: parsing, validation, messages and the printed endpoint table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

import danube_local.__main__ as cli
from danube_local.cluster import LocalCluster, ServiceProcess
from tests.unit.deploy.test_procs import FakeProc

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


def test_up_defaults() -> None:
    a = parse("up")
    assert (a.brokers, a.workdir, a.cluster, a.etcd_endpoint) == (3, Path(".danube-local"), "danube", None)
    assert (a.leaders, a.load_managers) == (2, 2)
    assert (a.lookup_port, a.admin_port, a.broker_ports) == (6650, 50051, None)
    assert not a.demo and not a.exit_after_demo and a.log_level == "INFO"


def test_up_options() -> None:
    a = parse(
        "up", "--brokers", "2", "--broker-ports", "6651,6652", "--lookup-port", "0", "--demo",
        "--exit-after-demo", "--log-level", "debug", "--etcd-endpoint", "10.0.0.1:2379", "--cluster", "x",
    )  # fmt: skip
    assert a.brokers == 2 and a.broker_ports == [6651, 6652] and a.lookup_port == 0
    assert a.demo and a.exit_after_demo and a.log_level == "DEBUG"
    assert a.etcd_endpoint == "10.0.0.1:2379" and a.cluster == "x"


def test_brokers_auto_is_one_per_available_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {0, 1, 2, 5}, raising=False)
    assert parse("up", "--brokers", "auto").brokers == 4
    with pytest.raises(SystemExit):
        parse("up", "--brokers", "many")


@pytest.mark.parametrize(
    "argv",
    [
        ["up", "--broker-ports", "66x"],
        ["up", "--broker-ports", "70000"],
        ["up", "--lookup-port", "1,2"],
        ["up", "--log-level", "LOUD"],
        ["down"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["up", "--help"]):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 0
    out = capsys.readouterr().out
    assert "danube-local up --demo" in out and "--load-managers 0" in out
    assert "--exit-after-demo" in out and "examples:" in out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == cli.EXIT_USAGE
    assert "usage: danube-local" in capsys.readouterr().out


def run_up(*argv: str) -> tuple[int, str]:
    said: list[str] = []
    rc = cli.cmd_up(parse("up", *argv), say=said.append)
    return rc, "\n".join(said)


def test_broker_ports_must_match_brokers() -> None:
    rc, out = run_up("--brokers", "2", "--broker-ports", "6651")
    assert rc == cli.EXIT_USAGE and "1 port(s) for 2 broker(s)" in out


def test_at_least_one_broker() -> None:
    rc, out = run_up("--load-managers", "1", "--leaders", "0")
    assert rc == cli.EXIT_USAGE and "leader service" in out
    rc, out = run_up("--brokers", "0")
    assert rc == cli.EXIT_USAGE and "at least 1" in out


def test_missing_etcd_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    rc, out = run_up()
    assert rc == cli.EXIT_FAILED
    assert "./quickstart.sh" in out and "sudo apt-get install etcd-server" in out


def ready_cluster(tmp_path: Path) -> LocalCluster:
    lc = LocalCluster(workdir=tmp_path, etcd_endpoint="127.0.0.1:2379")
    lk = lc._lookup_service()
    lk.proc = FakeProc(10)  # type: ignore[assignment]
    lk.info = {"service": "lookup", "url": "http://127.0.0.1:6650", "admin_url": "http://127.0.0.1:50051"}
    lc._lookup = lk
    brokers: list[ServiceProcess] = []
    for i, port in ((1, 40001), (2, 40002)):
        b = lc._broker_service(str(i), 0)
        b.proc = FakeProc(10 + i)  # type: ignore[assignment]
        b.info = {"service": "broker", "broker_id": str(i), "url": f"http://127.0.0.1:{port}"}
        brokers.append(b)
    lc.brokers = brokers
    return lc


def test_endpoints_table(tmp_path: Path) -> None:
    table = cli.endpoints_table(ready_cluster(tmp_path))
    lines = table.splitlines()
    assert lines[0].split() == ["component", "address", "pid", "log", "metrics"]
    assert "127.0.0.1:2379" in lines[1] and "(external)" in lines[1]
    assert "http://127.0.0.1:6650" in lines[2] and "lookup.log" in lines[2]
    assert "http://127.0.0.1:50051" in lines[3]
    assert lines[4].split()[:4] == ["broker", "1", "http://127.0.0.1:40001", "11"]
    assert "broker-2.log" in lines[5]


def test_next_steps_are_copy_pasteable(tmp_path: Path) -> None:
    text = cli.next_steps(ready_cluster(tmp_path))
    assert "danube-cli produce -s http://127.0.0.1:6650 -t /default/demo -m hello" in text
    assert "danube-cli consume -s http://127.0.0.1:6650 -t /default/demo" in text
    assert "danube-admin --admin-url http://127.0.0.1:50051 topics list" in text


def test_up_reports_a_failed_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from danube_local.cluster import ClusterError

    def fail(self: LocalCluster, timeout_s: float = 0) -> Any:
        raise ClusterError("broker-1 exited with code 1 before it was ready")

    stopped: list[bool] = []
    monkeypatch.setattr(LocalCluster, "start", fail)
    monkeypatch.setattr(LocalCluster, "stop", lambda self: stopped.append(True))
    rc, out = run_up("--workdir", str(tmp_path), "--etcd-endpoint", "127.0.0.1:1")
    assert rc == cli.EXIT_FAILED
    assert "did not start" in out and "broker-1 exited with code 1" in out
    assert stopped == [True]


def test_s3_flags_become_object_store_settings() -> None:
    assert cli.s3_settings(parse("up")) is None  # the local directory by default
    minio = cli.s3_settings(parse("up", "--s3-endpoint", "http://127.0.0.1:9000", "--s3-bucket", "b"))
    assert minio == {
        "BACKEND": "s3",
        "S3__BUCKET": "b",
        "S3__REGION": "us-east-1",
        "S3__ENDPOINT_URL": "http://127.0.0.1:9000",
        "S3__PATH_STYLE": "true",
        "S3__CREATE_BUCKET": "true",
    }
    aws = cli.s3_settings(parse("up", "--s3-endpoint", "aws", "--s3-region", "eu-west-1"))
    assert aws == {"BACKEND": "s3", "S3__BUCKET": "danube-wal", "S3__REGION": "eu-west-1"}
