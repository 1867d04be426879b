"""Argument parsing of danube-admin and danube-lookup, table/JSON output, error explanations."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from danube_common.config import EtcdConfig
from danube_common.errors import ConfigError
from danube_common.service import ServiceReady, remove_ready_file, split_host_port, write_ready_file
from danube_lookup.__main__ import load
from danube_lookup.config import LookupConfig
from danube_sdk.cli import admin
from danube_sdk.cli.output import emit, render_table

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------------------- output


def test_render_table_aligns_columns_and_marks_empty_cells() -> None:
    rows = [
        {"topic": "/default/orders", "partitions": 3, "broker": "", "subs": ["a", "b"]},
        {"topic": "/d/x", "partitions": None, "broker": "b-1", "subs": []},
    ]
    assert render_table(rows).splitlines() == [
        "TOPIC            PARTITIONS  BROKER  SUBS",
        "/default/orders  3           -       a,b",
        "/d/x             -           b-1     -",
    ]
    assert render_table(rows, ["broker"]).splitlines() == ["BROKER", "-", "b-1"]
    assert render_table([]) == "(none)"


def test_emit_json_round_trips() -> None:
    out = io.StringIO()
    emit([{"a": 1}], fmt="json", out=out)
    assert json.loads(out.getvalue()) == [{"a": 1}]
    out = io.StringIO()
    emit([], fmt="json", json_data={"deleted": ["/a/b"]}, out=out)
    assert json.loads(out.getvalue()) == {"deleted": ["/a/b"]}


# ---------------------------------------------------------------------------- danube-admin parsing


def test_admin_parses_every_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(admin.ENV_ADMIN_URL, raising=False)
    p = admin.build_parser()
    a = p.parse_args(
        ["topics", "create", "/default/t", "--partitions", "3", "--dispatch-strategy", "reliable"]
    )
    assert (a.func, a.topic, a.partitions, a.dispatch_strategy) == (
        admin.topics_create,
        "/default/t",
        3,
        "reliable",
    )
    assert (a.admin_url, a.output, a.timeout_s) == (admin.DEFAULT_ADMIN_URL, "table", 10.0)
    a = p.parse_args(["topics", "list", "--namespace", "ns"])
    assert (a.func, a.namespace) == (admin.topics_list, "ns")
    assert p.parse_args(["brokers", "list"]).func is admin.brokers_list
    assert p.parse_args(["namespaces", "delete", "x"]).func is admin.namespaces_delete
    assert p.parse_args(["topics", "describe", "/a/b"]).func is admin.topics_describe
    assert p.parse_args(["topics", "delete", "/a/b"]).func is admin.topics_delete


def test_admin_global_options_before_or_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(admin.ENV_ADMIN_URL, "http://env:1")
    p = admin.build_parser()
    a = p.parse_args(["namespaces", "list"])
    assert a.admin_url == "http://env:1"
    a = p.parse_args(["--output", "json", "--admin-url", "http://x:2", "namespaces", "list"])
    assert (a.output, a.admin_url) == ("json", "http://x:2")
    a = p.parse_args(["namespaces", "list", "-o", "json", "--timeout-s", "2.5", "--admin-url", "http://y:3"])
    assert (a.output, a.timeout_s, a.admin_url) == ("json", 2.5, "http://y:3")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["topics"],
        ["topics", "create"],
        ["topics", "create", "/a/b", "--partitions", "-1"],
        ["topics", "create", "/a/b", "--partitions", "x"],
        ["topics", "create", "/a/b", "--dispatch-strategy", "fast"],
        ["--output", "yaml", "brokers", "list"],
        ["--timeout-s", "0", "brokers", "list"],
        ["nope"],
    ],
)
def test_admin_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin.main(argv)
    assert info.value.code == 2
    assert "usage: danube-admin" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["topics", "--help"], ["topics", "create", "--help"]])
def test_admin_help_has_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin.main(argv)
    assert info.value.code == 0
    assert "examples:" in capsys.readouterr().out


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, md: tuple[tuple[str, str], ...] = ()) -> None:
        self._code, self._details, self._md = code, details, md

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._md


@pytest.mark.parametrize(
    ("exc", "message", "hint"),
    [
        (FakeRpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect"), "cannot reach", "danube-local up"),
        (FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), "within 3s", "--timeout-s"),
        (FakeRpcError(grpc.StatusCode.UNIMPLEMENTED, ""), "does not serve the admin API", "50051"),
        (
            FakeRpcError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "namespace 'x' still has 1 topic(s) [NAMESPACE_NOT_EMPTY]",
                (("x-danube-error-code", "NAMESPACE_NOT_EMPTY"),),
            ),
            "namespace 'x' still has 1 topic(s)",
            "topics list --namespace",
        ),
        (
            FakeRpcError(
                grpc.StatusCode.UNAVAILABLE,
                "no active broker [NO_BROKER_AVAILABLE]",
                (("x-danube-error-code", "NO_BROKER_AVAILABLE"),),
            ),
            "no active broker",
            "start a broker",
        ),
    ],
)
def test_explain_errors(exc: FakeRpcError, message: str, hint: str) -> None:
    got_message, got_hint = admin.explain(exc, "http://h:1", 3.0)
    assert message in got_message and "[" not in got_message
    assert hint in got_hint


# ---------------------------------------------------------------------------- danube-lookup config


def test_lookup_defaults() -> None:
    cfg = load([], env={})
    assert cfg.listen_addr == "0.0.0.0:6650" and cfg.admin_listen_addr == "0.0.0.0:50051"
    assert cfg.etcd == EtcdConfig(endpoints=["127.0.0.1:2379"], cluster="danube")
    assert cfg.advertised_host == "127.0.0.1" and cfg.bootstrap_namespaces == ["default"]
    assert cfg.ready_file is None


def test_lookup_layers_defaults_yaml_env_flags(tmp_path: Path) -> None:
    yml = tmp_path / "lookup.yaml"
    yml.write_text(
        "listen_addr: 10.0.0.1:7000\nadmin_listen_addr: 10.0.0.1:7001\n"
        "etcd:\n  cluster: fromyaml\n  request_timeout_s: 2\nbootstrap_namespaces: [a, b]\n"
    )
    env = {"DANUBE_LOOKUP_ADMIN_LISTEN_ADDR": "0.0.0.0:8001", "DANUBE_LOOKUP_ETCD__ENDPOINTS": "e1:1,e2:2"}
    cfg = load(["--config", str(yml), "--cluster", "fromflag", "--ready-file", "/tmp/r.json"], env=env)
    assert cfg.listen_addr == "10.0.0.1:7000"  # yaml
    assert cfg.admin_listen_addr == "0.0.0.0:8001"  # env beats yaml
    assert cfg.etcd.endpoints == ["e1:1", "e2:2"] and cfg.etcd.request_timeout_s == 2
    assert cfg.etcd.cluster == "fromflag"  # flag beats yaml
    assert cfg.bootstrap_namespaces == ["a", "b"] and cfg.ready_file == "/tmp/r.json"
    cfg = load(
        [
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--etcd-endpoints",
            " x:1 , y:2 ",
            "--advertised-host",
            "h",
            "--log-level",
            "debug",
        ],
        env=env,
    )
    assert (cfg.listen_addr, cfg.admin_listen_addr, cfg.etcd.endpoints) == (
        "127.0.0.1:0",
        "127.0.0.1:0",
        ["x:1", "y:2"],
    )
    assert (cfg.advertised_host, cfg.log_level) == ("h", "DEBUG")


@pytest.mark.parametrize(
    "argv",
    [
        ["--listen", "nonsense"],
        ["--admin-listen", "h:99999"],
        ["--log-level", "loud"],
        ["--config", "/does/not/exist.yaml"],
    ],
)
def test_lookup_bad_config_is_a_config_error(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        load(argv, env={})


def test_lookup_bad_bootstrap_namespace() -> None:
    with pytest.raises(ConfigError, match="bootstrap_namespaces"):
        load([], env={"DANUBE_LOOKUP_BOOTSTRAP_NAMESPACES": "ok,not/ok"})


def test_lookup_usage_error_exits_2() -> None:
    with pytest.raises(SystemExit) as info:
        load(["--bogus"], env={})
    assert info.value.code == 2


@pytest.mark.parametrize(
    ("addr", "expected"),
    [("0.0.0.0:6650", ("0.0.0.0", 6650)), ("[::1]:0", ("::1", 0)), ("h:65535", ("h", 65535))],
)
def test_split_host_port(addr: str, expected: tuple[str, int]) -> None:
    assert split_host_port(addr) == expected


def test_ready_file_is_written_whole_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "run" / "lookup.json"
    info = ServiceReady("lookup", "127.0.0.1:1234", 42, admin_addr="127.0.0.1:5678")
    write_ready_file(path, info.to_json())
    assert json.loads(path.read_text()) == {
        "service": "lookup",
        "addr": "127.0.0.1:1234",
        "url": "http://127.0.0.1:1234",
        "admin_addr": "127.0.0.1:5678",
        "admin_url": "http://127.0.0.1:5678",
        "pid": 42,
    }
    assert [p.name for p in path.parent.iterdir()] == ["lookup.json"]  # no temporary left behind
    remove_ready_file(path)
    remove_ready_file(path)  # idempotent
    assert not path.exists()


def test_config_is_frozen() -> None:
    cfg = LookupConfig()
    with pytest.raises(Exception, match="frozen"):
        cfg.listen_addr = "x:1"


def test_lookup_broker_rpc_timeout() -> None:
    assert load([], env={}).broker_rpc_timeout_s == 5.0
    assert load([], env={"DANUBE_LOOKUP_BROKER_RPC_TIMEOUT_S": "1.5"}).broker_rpc_timeout_s == 1.5
    with pytest.raises(ConfigError, match="broker_rpc_timeout_s"):
        load([], env={"DANUBE_LOOKUP_BROKER_RPC_TIMEOUT_S": "0"})
