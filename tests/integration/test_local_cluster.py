"""LocalCluster and the danube-local CLI with real processes.

Two halves:
- with *fake* services (tests/unit/deploy/fake_services, which honour the services' command-line
  contract): start, readiness, failures, stop, group kill, restart and the CLI's signal handling,
  independent of the real services;
- with the *real* danube-lookup and danube-broker: skipped until those packages exist.
Every test checks that no process it caused is left running.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_local.cluster import LocalCluster, ServiceFailed
from tests.support import wait_until, wait_until_sync

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAKES = Path(__file__).resolve().parents[1] / "unit" / "deploy" / "fake_services"


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cluster_pids(lc: LocalCluster) -> list[int]:
    pids = [s.pid for s in [lc.lookup, *lc.brokers] if s.proc is not None]
    if lc.etcd is not None and lc.etcd.proc is not None:
        pids.append(lc.etcd.proc.pid)
    return pids


def fake_env(**modes: str) -> dict[str, str]:
    env = {"PYTHONPATH": os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.update({f"FAKE_SERVICE_MODE{('_' + k.upper()) if k != 'all' else ''}": v for k, v in modes.items()})
    return env


@pytest.fixture
def fake_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    lc = LocalCluster(brokers=2, workdir=tmp_path / "wd", extra_env=fake_env(), stop_grace_s=5)
    yield lc
    lc.stop()


# ---------------------------------------------------------------- fake services


def test_start_and_stop_leave_nothing_behind(fake_cluster: LocalCluster) -> None:
    lc = fake_cluster.start(timeout_s=30)
    assert lc.service_url.startswith("http://127.0.0.1:") and lc.admin_url != lc.service_url
    assert [b.broker_id for b in lc.brokers] == ["1", "2"]
    for svc in [lc.lookup, *lc.brokers]:
        info = json.loads(svc.ready_file.read_text())
        assert info == svc.info and info["pid"] == svc.pid
        assert svc.log_path.exists() and svc.running
    assert len({b.url for b in lc.brokers}) == 2
    assert "danube_lookup" in lc.lookup.proc.args  # type: ignore[union-attr,operator]
    pids = cluster_pids(lc)
    assert len(pids) == 4 and all(alive(p) for p in pids)
    lc.stop()
    assert not any(alive(p) for p in pids)
    assert "fake lookup stopping" in lc.lookup.log_path.read_text(), "services get a graceful SIGTERM"


def test_crashing_service_fails_start_and_stops_the_rest(tmp_path: Path) -> None:
    lc = LocalCluster(brokers=2, workdir=tmp_path, extra_env=fake_env(broker_2="crash"))
    with pytest.raises(ServiceFailed) as info:
        lc.start(timeout_s=30)
    assert info.value.service == "broker-2"
    assert "exited with code 3" in str(info.value) and "boom, cannot start" in str(info.value)
    assert not any(alive(p) for p in cluster_pids(lc))


def test_service_that_never_gets_ready_times_out(tmp_path: Path) -> None:
    lc = LocalCluster(brokers=1, workdir=tmp_path, extra_env=fake_env(lookup="hang"))
    with pytest.raises(ServiceFailed, match="not ready within 2s: lookup"):
        lc.start(timeout_s=2)
    assert not any(alive(p) for p in cluster_pids(lc))


def test_service_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    lc = LocalCluster(
        brokers=1, workdir=tmp_path, extra_env=fake_env(broker_1="ignore-term"), stop_grace_s=0.5
    )
    lc.start(timeout_s=30)
    pids = cluster_pids(lc)
    lc.stop()
    assert lc.brokers[0].proc is not None and lc.brokers[0].proc.returncode == -signal.SIGKILL
    assert not any(alive(p) for p in pids)


def test_grandchildren_are_stopped_with_their_service(tmp_path: Path) -> None:
    lc = LocalCluster(brokers=1, workdir=tmp_path, extra_env=fake_env(broker_1="spawn-child"))
    lc.start(timeout_s=30)
    child = int(lc.brokers[0].info["child_pid"])
    assert alive(child)
    lc.stop()
    wait_until_sync(lambda: not alive(child), timeout_s=5, what="the grandchild to be gone")


def test_stop_restart_and_add_brokers(fake_cluster: LocalCluster) -> None:
    lc = fake_cluster.start(timeout_s=30)
    b2 = lc.brokers[1]
    old_pid, old_url = b2.pid, b2.url
    lc.stop_broker("2")
    assert not alive(old_pid) and lc.lookup.running and lc.brokers[0].running
    lc.restart_broker("2")
    assert b2.running and b2.pid != old_pid and b2.url == old_url, "a restarted broker keeps its port"
    killed_pid = lc.brokers[0].pid
    lc.restart_broker(0, kill=True)
    assert not alive(killed_pid) and lc.brokers[0].running
    new = lc.add_broker()
    assert new.broker_id == "3" and new.running and new.url not in {b.url for b in lc.brokers[:2]}
    pids = cluster_pids(lc)
    lc.stop()
    assert not any(alive(p) for p in pids)


def test_the_supervisor_restarts_what_exits_on_the_same_ports(fake_cluster: LocalCluster) -> None:
    """The lookup (asked for any free port) killed -9 comes back on the ports it had; a broker
    stopped through the cluster stays stopped; our etcd killed -9 comes back on its endpoint."""
    from danube_local.supervise import Supervisor

    lc = fake_cluster.start(timeout_s=30)
    said: list[str] = []
    sup = Supervisor(lc, say=said.append)
    before = (lc.lookup.pid, lc.lookup.addr, lc.lookup.admin_addr)
    lc.signal("lookup", signal.SIGKILL)
    lc.stop_broker("2")
    assert [s.name for s in sup.exited()] == ["lookup"]
    assert sup.check() == ["lookup"] and said[-1].startswith("lookup exited with code -9: restarted")
    assert lc.lookup.running and lc.lookup.pid != before[0]
    assert (lc.lookup.addr, lc.lookup.admin_addr) == before[1:]
    assert not lc.brokers[1].running and sup.check() == []

    assert lc.etcd is not None and lc.etcd.proc is not None
    endpoint, old_etcd = lc.etcd.endpoint, lc.etcd.proc.pid
    os.kill(old_etcd, signal.SIGKILL)
    lc.etcd.proc.wait(timeout=10)
    assert sup.check() == ["etcd"]
    assert lc.etcd.proc.pid != old_etcd and lc.etcd.proc.poll() is None and lc.etcd.endpoint == endpoint


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _cli(
    tmp_path: Path, *args: str, env_extra: dict[str, str], sigint_ignored: bool = False
) -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp_path / "cli.out"
    env = {**os.environ, **env_extra}
    argv = [sys.executable, "-m", "danube_local", "up", "--workdir", str(tmp_path / "wd"),
            "--lookup-port", "0", "--admin-port", "0", "--console-port", "0", "--traces-port", "0",
            *args]  # fmt: skip
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            preexec_fn=_ignore_sigint if sigint_ignored else None,
        )  # fmt: skip
    return proc, out


def _pids_in(output: str) -> list[int]:
    """Every pid the CLI reported starting (its progress lines say "(pid N)")."""
    return list(dict.fromkeys(int(m) for m in re.findall(r"\(pid (\d+)\)", output)))


def reap(proc: subprocess.Popen[bytes], out: Path) -> None:
    """After a test of the launcher: kill it if it still runs, and every process it reported
    starting (they run in their own sessions), so a failing run leaves nothing behind."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in _pids_in(out.read_text()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("sig", "sigint_ignored"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
    # A background job of a shell script starts with SIGINT ignored; Ctrl-C must still stop it.
    ids=["ctrl-c", "sigterm", "ctrl-c-as-background-job"],
)
def test_cli_up_runs_until_signalled(tmp_path: Path, sig: int, sigint_ignored: bool) -> None:
    proc, out = _cli(
        tmp_path,
        *("--brokers", "2", "--leaders", "0", "--load-managers", "0", "--no-uploaders"),
        env_extra=fake_env(),
        sigint_ignored=sigint_ignored,
    )
    try:
        wait_until_sync(lambda: b"Press Ctrl-C" in out.read_bytes() or proc.poll() is not None, timeout_s=30)
        text = out.read_text()
        assert "Press Ctrl-C" in text, text
        for expected in (
            "etcd",
            "lookup (service URL)",
            "admin",
            "broker 1",
            "broker 2",
            "danube-cli produce -s",
        ):
            assert expected in text
        pids = _pids_in(text)
        assert len(pids) == 4 and all(alive(p) for p in pids), "etcd, lookup and two brokers"
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        text = out.read_text()
        assert "stopping broker 2" in text and "stopped  etcd" in text
        assert not any(alive(p) for p in pids)
    finally:
        reap(proc, out)


def test_cli_exit_after_demo_fails_without_sdk(tmp_path: Path) -> None:
    env = fake_env()
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES / "no_sdk"), env["PYTHONPATH"]])
    proc, out = _cli(
        tmp_path,
        "--brokers",
        "1",
        "--leaders",
        "0",
        "--load-managers",
        "0",
        "--no-uploaders",
        "--exit-after-demo",
        env_extra=env,
    )
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.read_text()
    assert rc == 1, text
    assert "demo FAILED" in text and "danube_sdk" in text and "stopped  etcd" in text
    pids = _pids_in(text)
    assert len(pids) == 3 and not any(alive(p) for p in pids)


# ---------------------------------------------------------------- real services


def _missing(*modules: str) -> list[str]:
    missing = []
    for m in modules:
        try:
            found = importlib.util.find_spec(m) is not None
        except ImportError:
            found = False
        if not found:
            missing.append(m)
    return missing


real_services = pytest.mark.skipif(
    bool(_missing("danube_broker.__main__", "danube_lookup.__main__")),
    reason=f"services not written yet: {_missing('danube_broker.__main__', 'danube_lookup.__main__')} "
    "not importable (remove this skip once they exist)",
)


@real_services
async def test_real_cluster_with_two_brokers(tmp_path: Path) -> None:
    lc = LocalCluster(brokers=2, workdir=tmp_path / "wd", cluster="itest")
    try:
        await _in_thread(lc.start, 60)
        assert lc.lookup.info["service"] == "lookup" and lc.lookup.info["pid"] == lc.lookup.pid
        assert lc.service_url.startswith("http://") and lc.admin_url.startswith("http://")
        for b in lc.brokers:
            assert b.info["service"] == "broker" and str(b.info["broker_id"]) == b.broker_id
            assert b.info["pid"] == b.pid and b.url.startswith("http://")
        store = EtcdStore([lc.etcd_endpoint])
        try:
            prefix = Keys("itest").brokers_prefix()

            async def registered() -> set[str]:
                kvs, _ = await store.get_prefix(prefix)
                return {kv.key[len(prefix) :] for kv in kvs if "/" not in kv.key[len(prefix) :]}

            await wait_until(
                lambda: _has(registered(), {"1", "2"}), timeout_s=20, what="both brokers registered"
            )
        finally:
            await store.aclose()
        pids = cluster_pids(lc)
    finally:
        await _in_thread(lc.stop)
    assert not any(alive(p) for p in pids)


@real_services
@pytest.mark.skipif(bool(_missing("danube_sdk.client")) and bool(_missing("danube_sdk")), reason="no SDK yet")
def test_real_cli_demo_exits_0(tmp_path: Path) -> None:
    proc, out = _cli(tmp_path, "--brokers", "1", "--demo", "--exit-after-demo", env_extra={})
    try:
        rc = proc.wait(timeout=100)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.read_text()
    assert rc == 0, text
    assert "demo: produced 10, consumed 10 in " in text
    pids = _pids_in(text)
    # etcd, 2 leader replicas, 1 WAL uploader, lookup, 1 broker, 2 load managers: all started, all stopped.
    assert len(pids) == 8 and not any(alive(p) for p in pids)
    assert "leader-2" in text and "load-manager-2" in text and "wal-uploader-1" in text
    # The demo's span exporter is shut down before the trace sink: no gRPC noise about a
    # connection going away at the end of the quickstart.
    assert "GOAWAY" not in text and "chttp2" not in text, text[-2000:]
    # Tracing is on: the demo printed its last message's trace, from the demo client through the
    # broker and back, and `danube-local traces` reads the same trace from the sink's file.
    tree = text[text.index("demo: the trace of its last message") :]
    for line in (
        "send /default/demo  [danube-local-demo]",
        "publish /default/demo  [danube-broker broker[1]]",
        "deliver /default/demo  [danube-broker broker[1]]",
        "process /default/demo  [danube-local-demo]",
    ):
        assert line in tree, tree
    assert "(offset=9" in tree and "settled=ack" in tree
    trace_id = re.search(r"trace ([0-9a-f]{32}):", tree).group(1)  # type: ignore[union-attr]
    shown = subprocess.run(
        [sys.executable, "-m", "danube_local", "traces", "--workdir", str(tmp_path / "wd"), "--topic",
         "/default/demo"], capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    assert shown.startswith(f"trace {trace_id}:") and "process /default/demo" in shown


async def _has(coro: object, wanted: set[str]) -> bool:
    return wanted <= await coro  # type: ignore[operator,misc]


async def _in_thread(fn: object, *args: object) -> object:
    import asyncio

    return await asyncio.to_thread(fn, *args)  # type: ignore[arg-type]


@real_services
def test_every_process_of_the_full_stack_stops(tmp_path: Path) -> None:
    """Leaders, uploaders, load managers and the planner are all stopped (none left behind)."""
    lc = LocalCluster(
        brokers=1, leaders=1, load_managers=1, uploaders=True, planner="python", workdir=tmp_path / "wd"
    )
    lc.start(timeout_s=60)
    try:
        assert lc.planner is not None and lc.planner.ready and lc.planner.info["engine"] == "python"
        procs = [lc.planner, *lc.leaders, *lc.load_managers, *lc.uploaders.values(), lc.lookup, *lc.brokers]
        pids = [s.pid for s in procs]
    finally:
        lc.stop()
    assert len(pids) == 6 and not any(alive(p) for p in pids)


def _broker_pids(text: str, broker: str) -> list[int]:
    """The pids the launcher reported for ``broker`` ("broker 2 ... (pid N)"), each once."""
    return list(dict.fromkeys(int(m) for m in re.findall(rf"{broker} .*\(pid (\d+)\)", text)))


@pytest.mark.parametrize("restart", [True, False], ids=["restarts", "no-restart"])
def test_cli_up_restarts_a_service_that_exits(tmp_path: Path, restart: bool) -> None:
    """A broker killed behind the launcher's back (kill -9, as a lost lease's exit would be) is
    started again with its id and port; with --no-restart it is reported and left stopped."""
    proc, out = _cli(
        tmp_path,
        *("--brokers", "2", "--leaders", "0", "--load-managers", "0", "--no-uploaders"),
        *(() if restart else ("--no-restart",)),
        env_extra=fake_env(),
    )
    try:
        wait_until_sync(lambda: b"Press Ctrl-C" in out.read_bytes() or proc.poll() is not None, timeout_s=30)
        text = out.read_text()
        assert ("A service that exits is started again." in text) == restart, text
        [victim] = _broker_pids(text, "broker 2")
        os.kill(victim, signal.SIGKILL)
        expected = (
            "broker 2 exited with code -9: restarted" if restart else "warning: broker 2 exited with code -9"
        )
        wait_until_sync(lambda: expected in out.read_text(), timeout_s=30, what=expected)
        text = out.read_text()
        if restart:
            started = _broker_pids(text, "broker 2")
            assert len(started) == 2 and started[0] == victim and alive(started[1]), text
            urls = re.findall(r"broker 2\s+(http://\S+)", text)
            assert len(urls) >= 2 and len(set(urls)) == 1, f"the same port again: {urls}"
        else:
            assert "restarted" not in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not any(alive(p) for p in _pids_in(out.read_text()))
    finally:
        reap(proc, out)
