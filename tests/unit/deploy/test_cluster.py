"""LocalCluster without real processes: command lines, environment, readiness and stop logic."""

from __future__ import annotations

import json
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

import danube_local.cluster as cluster_mod
from danube_local.cluster import ClusterError, LocalCluster, ServiceFailed, ServiceProcess
from tests.unit.deploy.test_procs import FakeProc, Signals

pytestmark = pytest.mark.unit


def make(tmp_path: Path, **kw: Any) -> LocalCluster:
    kw.setdefault("etcd_endpoint", "127.0.0.1:2379")
    return LocalCluster(workdir=tmp_path / "wd", **kw)


# ---------------------------------------------------------------- command lines


def test_lookup_and_broker_command_lines(tmp_path: Path) -> None:
    lc = make(
        tmp_path, brokers=2, cluster="c1", python="/opt/py", lookup_port=6650, admin_port=50051,
        broker_ports=[6651, 6652], log_level="DEBUG", host="127.0.0.2",
        lookup_config=tmp_path / "l.yaml", broker_config=tmp_path / "b.yaml",
    )  # fmt: skip
    run = tmp_path / "wd" / "run"
    assert lc.lookup_argv() == [
        "/opt/py", "-m", "danube_lookup",
        "--listen", "127.0.0.2:6650",
        "--admin-listen", "127.0.0.2:50051",
        "--etcd-endpoints", "127.0.0.1:2379",
        "--cluster", "c1",
        "--ready-file", str(run / "lookup.json"),
        "--log-level", "DEBUG",
        "--http-listen", "127.0.0.2:0",
        "--config", str(tmp_path / "l.yaml"),
    ]  # fmt: skip
    assert lc.broker_argv("2", 6652) == [
        "/opt/py", "-m", "danube_broker",
        "--broker-id", "2",
        "--listen", "127.0.0.2:6652",
        "--advertised-host", "127.0.0.2",
        "--etcd-endpoints", "127.0.0.1:2379",
        "--cluster", "c1",
        "--ready-file", str(run / "broker-2.json"),
        "--log-level", "DEBUG",
        "--http-listen", "127.0.0.2:0",
        "--config", str(tmp_path / "b.yaml"),
    ]  # fmt: skip


def test_defaults(tmp_path: Path) -> None:
    lc = make(tmp_path)
    argv = lc.lookup_argv()
    assert argv[:3] == [sys.executable, "-m", "danube_lookup"]
    assert "--config" not in argv
    assert argv[argv.index("--listen") + 1] == "127.0.0.1:0", "port 0: the service picks a free port"
    assert lc.workdir.is_absolute()
    assert lc.log_dir == lc.workdir / "logs" and lc.run_dir == lc.workdir / "run"


def test_child_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("no_proxy", "corp.example")
    lc = make(tmp_path, extra_env={"DANUBE_BROKER_X": "1"})
    env = lc.child_env()
    assert env["DANUBE_BROKER_X"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["no_proxy"].split(",")[:2] == ["corp.example", "127.0.0.1"]


@pytest.mark.parametrize(
    ("kw", "text"), [({"brokers": -1}, "brokers"), ({"broker_ports": [1, 2]}, "2 broker ports")]
)
def test_bad_arguments(tmp_path: Path, kw: dict[str, Any], text: str) -> None:
    with pytest.raises(ClusterError, match=text):
        make(tmp_path, **kw)


def test_endpoints_before_start(tmp_path: Path) -> None:
    assert make(tmp_path).etcd_endpoint == "127.0.0.1:2379"
    own = LocalCluster(workdir=tmp_path)
    with pytest.raises(ClusterError):
        _ = own.etcd_endpoint
    with pytest.raises(ClusterError):
        _ = own.service_url


def test_busy_port_is_reported_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        lc = make(tmp_path, lookup_port=port)
        with pytest.raises(ClusterError, match=f"lookup port {port}"):
            lc.start()
    assert not (tmp_path / "wd" / "logs").exists()


# ---------------------------------------------------------------- readiness


def service(lc: LocalCluster, kind: str = "broker", broker_id: str = "1", proc: Any = None) -> ServiceProcess:
    svc = lc._broker_service(broker_id, 0) if kind == "broker" else lc._lookup_service()
    svc.proc = proc or FakeProc(4242)
    svc.ready_file.parent.mkdir(parents=True, exist_ok=True)
    svc.log_path.parent.mkdir(parents=True, exist_ok=True)
    return svc


def test_ready_file_is_accepted(tmp_path: Path) -> None:
    said: list[str] = []
    lc = make(tmp_path, progress=said.append)
    svc = service(lc)
    info = {"service": "broker", "broker_id": "1", "addr": "127.0.0.1:7001", "url": "http://127.0.0.1:7001"}
    svc.ready_file.write_text(json.dumps(info))
    lc._wait_ready([svc], deadline=float("inf"), timeout_s=1)
    assert svc.info == info and svc.url == "http://127.0.0.1:7001" and svc.port == 7001
    assert said == ["broker 1  http://127.0.0.1:7001  (pid 4242)"]


def test_service_that_dies_fails_start_with_its_log(tmp_path: Path) -> None:
    lc = make(tmp_path)
    svc = service(lc, proc=FakeProc(1, exited=3))
    svc.log_path.write_text("starting\nTraceback: etcd unreachable\n")
    with pytest.raises(ServiceFailed) as info:
        lc._wait_ready([svc], deadline=float("inf"), timeout_s=1)
    assert "broker-1 exited with code 3" in str(info.value)
    assert "etcd unreachable" in str(info.value) and info.value.service == "broker-1"


def test_late_service_fails_start(tmp_path: Path) -> None:
    lc = make(tmp_path)
    svc = service(lc, kind="lookup")
    with pytest.raises(ServiceFailed, match="not ready within 1s: lookup"):
        lc._wait_ready([svc], deadline=0.0, timeout_s=1)


@pytest.mark.parametrize(
    "info",
    [{"service": "lookup", "addr": "h:1", "url": "u"}, {"service": "broker", "broker_id": "9", "url": "u"}],
)
def test_ready_file_of_the_wrong_service_is_refused(tmp_path: Path, info: dict[str, str]) -> None:
    lc = make(tmp_path)
    svc = service(lc)
    svc.ready_file.write_text(json.dumps(info))
    with pytest.raises(ServiceFailed):
        lc._wait_ready([svc], deadline=float("inf"), timeout_s=1)


def test_info_before_ready(tmp_path: Path) -> None:
    svc = service(make(tmp_path))
    with pytest.raises(ClusterError, match="not ready"):
        _ = svc.url


# ---------------------------------------------------------------- stop


class FakeEtcd:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.endpoint = "127.0.0.1:1"
        self.stops = 0

    def stop(self) -> None:
        self.stops += 1
        self.log.append("etcd stopped")


class FakeAtexit:
    def __init__(self) -> None:
        self.registered: list[Any] = []

    def register(self, fn: Any) -> None:
        self.registered.append(fn)

    def unregister(self, fn: Any) -> None:
        self.registered = [f for f in self.registered if f != fn]


def running_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[LocalCluster, Signals, list[str]]:
    events: list[str] = []
    lc = make(tmp_path, brokers=2, progress=events.append)
    sig = Signals()

    def send(proc: Any, s: int) -> None:
        events.append(f"signal {s} -> {proc.pid}")
        sig(proc, s)

    lc._send_signal = send
    lc._lookup = service(lc, "lookup", proc=FakeProc(100))
    lc.brokers = [service(lc, "broker", "1", FakeProc(101)), service(lc, "broker", "2", FakeProc(102))]
    lc._etcd = FakeEtcd(events)  # type: ignore[assignment]
    lc._started = True
    fake_atexit = FakeAtexit()
    monkeypatch.setattr(cluster_mod, "atexit", fake_atexit)
    fake_atexit.register(lc.stop)
    return lc, sig, events


def test_stop_terminates_services_then_etcd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lc, sig, events = running_cluster(tmp_path, monkeypatch)
    lc.stop()
    terms = [(pid, s) for pid, s in sig.sent if s == signal.SIGTERM]
    assert terms == [(100, signal.SIGTERM), (101, signal.SIGTERM), (102, signal.SIGTERM)]
    assert events.index("etcd stopped") > max(i for i, e in enumerate(events) if e.startswith("signal"))
    assert all(not s.running for s in [lc.lookup, *lc.brokers])
    assert "stopping broker 2 (pid 102)" in events and "stopped  lookup (exited, exit 0)" in events
    assert cluster_mod.atexit.registered == []  # type: ignore[attr-defined]


def test_stop_ends_the_load_managers_before_signalling_the_data_plane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load managers resign and exit first, so a stopping broker finds no leader to hand
    its topics over to and does not wait its lame duck out."""
    lc, sig, _ = running_cluster(tmp_path, monkeypatch)
    lms = [lc._indexed_service("load_manager", i, []) for i in (1, 2)]
    lms[0].proc, lms[1].proc = FakeProc(201, term_polls=3), FakeProc(202)  # type: ignore[assignment]
    lc.load_managers = lms
    leader = lc._indexed_service("leader", 1, [])
    leader.proc = FakeProc(301)  # type: ignore[assignment]
    lc.leaders = [leader]
    lc.stop()
    terms = [pid for pid, s in sig.sent if s == signal.SIGTERM]
    assert terms == [201, 202, 100, 101, 102, 301]
    lm_exits = [i for i, (pid, s) in enumerate(sig.sent) if pid in (201, 202) and s == signal.SIGKILL]
    first_data_plane = sig.sent.index((100, signal.SIGTERM))
    assert len(lm_exits) == 2 and max(lm_exits) < first_data_plane, sig.sent
    assert all(not s.running for s in [*lms, lc.lookup, *lc.brokers, leader])


def test_stop_is_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lc, sig, _ = running_cluster(tmp_path, monkeypatch)
    lc.stop()
    n = len(sig.sent)
    lc.stop()
    assert len(sig.sent) == n
    assert lc._etcd.stops == 1  # type: ignore[union-attr]
    with pytest.raises(ClusterError, match="stopped"):
        lc.start()


def test_stop_skips_services_that_already_exited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lc, sig, _ = running_cluster(tmp_path, monkeypatch)
    lc.brokers[0].proc = FakeProc(101, exited=1)  # type: ignore[assignment]
    lc.stop()
    assert 101 not in [pid for pid, _ in sig.sent]


def test_stop_broker_graceful_and_kill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lc, sig, _ = running_cluster(tmp_path, monkeypatch)
    out = lc.stop_broker(0)
    assert out is not None and out.how == "exited"
    assert sig.sent[0] == (101, signal.SIGTERM)
    sig.sent.clear()
    out = lc.stop_broker("2", kill=True)
    assert out is not None and out.how == "killed"
    assert sig.sent == [(102, signal.SIGKILL)]
    assert lc.lookup.running and [b.broker_id for b in lc.brokers] == ["1", "2"], (
        "stopped brokers stay listed"
    )


@pytest.mark.parametrize("which", [5, "9"])
def test_stop_unknown_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: int | str) -> None:
    lc, _, _ = running_cluster(tmp_path, monkeypatch)
    with pytest.raises(ClusterError, match="no broker"):
        lc.stop_broker(which)


def fake_spawn(lc: LocalCluster, pids: list[int]) -> list[ServiceProcess]:
    """Replace _spawn: the 'process' becomes ready at once on the port its command line asks for."""
    spawned: list[ServiceProcess] = []

    def spawn(svc: ServiceProcess) -> None:
        listen = svc.argv[svc.argv.index("--listen") + 1]
        port = listen.rsplit(":", 1)[1]
        port = port if port != "0" else "7999"
        svc.proc = FakeProc(pids.pop(0))  # type: ignore[assignment]
        svc.info = {}
        svc.ready_file.parent.mkdir(parents=True, exist_ok=True)
        info = {"service": "broker", "broker_id": svc.broker_id, "addr": f"127.0.0.1:{port}",
                "url": f"http://127.0.0.1:{port}"}  # fmt: skip
        svc.ready_file.write_text(json.dumps(info))
        spawned.append(svc)

    lc._spawn = spawn  # type: ignore[method-assign]
    return spawned


def test_restart_broker_keeps_id_and_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lc, sig, _ = running_cluster(tmp_path, monkeypatch)
    b = lc.brokers[1]
    b.info = {"service": "broker", "broker_id": "2", "addr": "127.0.0.1:7102", "url": "http://127.0.0.1:7102"}
    spawned = fake_spawn(lc, [202])
    again = lc.restart_broker("2")
    assert again is b and spawned == [b]
    assert (102, signal.SIGTERM) in sig.sent, "the old process was stopped first"
    assert b.argv[b.argv.index("--listen") + 1] == "127.0.0.1:7102"
    assert b.pid == 202 and b.url == "http://127.0.0.1:7102"


def test_add_broker_takes_the_next_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lc, _, _ = running_cluster(tmp_path, monkeypatch)
    fake_spawn(lc, [303])
    new = lc.add_broker()
    assert new.broker_id == "3" and new.name == "broker-3" and lc.brokers[-1] is new
    assert new.log_path == lc.log_dir / "broker-3.log"


def test_failed_start_stops_what_was_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_atexit = FakeAtexit()
    monkeypatch.setattr(cluster_mod, "atexit", fake_atexit)
    events: list[str] = []
    lc = LocalCluster(workdir=tmp_path, progress=events.append)
    lc._send_signal = Signals()

    def etcd_then_fail(timeout_s: float) -> None:
        lc._etcd = FakeEtcd(events)  # type: ignore[assignment]
        raise RuntimeError("etcd exited with 1")

    monkeypatch.setattr(lc, "_start_etcd", etcd_then_fail)
    with pytest.raises(RuntimeError, match="etcd exited"):
        lc.start()
    assert "etcd stopped" in events
    assert fake_atexit.registered == [], "a failed start leaves no atexit hook behind"


def test_a_restart_keeps_the_ports_a_service_got() -> None:
    argv = [
        "py",
        "-m",
        "danube_leader",
        "--listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--x",
        "1",
    ]
    info = {"addr": "127.0.0.1:41000", "http_addr": "127.0.0.1:41001", "admin_addr": "127.0.0.1:9"}
    assert cluster_mod.pinned_ports(argv, info) == [
        "py", "-m", "danube_leader", "--listen", "127.0.0.1:41000", "--http-listen", "127.0.0.1:41001", "--x", "1",
    ]  # fmt: skip
    assert argv[4] == "127.0.0.1:0", "the first command line is left as it was"
    fixed = ["b", "--listen", "127.0.0.2:6651", "--http-listen", "127.0.0.2:0"]
    assert (
        cluster_mod.pinned_ports(fixed, {"addr": "127.0.0.2:6651"}) == fixed
    )  # asked ports stay; no http_addr
    assert cluster_mod.pinned_ports(argv, {}) == argv  # never ready: nothing to keep
