"""``python -m danube_broker`` as a child process: ready file, SIGTERM, and dying loudly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.resources import Resources
from tests.support import unique, wait_until, wait_until_sync

pytestmark = pytest.mark.integration


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("DANUBE_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def start(etcd: EtcdProcess, cluster: str, ready: Path, log: Path, **env: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "danube_broker",
        "--broker-id", unique("cli"),
        "--listen", "127.0.0.1:0",
        "--etcd-endpoints", etcd.endpoint,
        "--cluster", cluster,
        "--ready-file", str(ready),
    ]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=child_env(**env))


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


async def test_ready_file_then_sigterm_exits_0_and_deregisters(
    etcd_server: EtcdProcess,
    cluster_name: str,
    etcd_resources: Resources,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    ready, log = tmp_path / "broker.json", tmp_path / "broker.log"
    proc = start(etcd_server, cluster_name, ready, log)
    procs.append(proc)
    await wait_until(lambda: ready.exists() or proc.poll() is not None, timeout_s=30, what="ready file")
    assert proc.poll() is None, log.read_text()
    info = json.loads(ready.read_text())
    assert info["service"] == "broker" and info["pid"] == proc.pid
    host, port = info["addr"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert info["url"] == f"http://{info['addr']}" and info["broker_id"].startswith("cli-")
    record = await etcd_resources.get_broker(info["broker_id"])
    assert record is not None and record.advertised_url == info["url"] and record.broker_addr == info["addr"]

    proc.send_signal(signal.SIGTERM)
    await wait_until(lambda: proc.poll() is not None, timeout_s=30, what="exit after SIGTERM")
    assert proc.returncode == 0, log.read_text()
    assert not ready.exists(), "the ready file is removed on exit"
    text = log.read_text()
    assert "revoked" in text and "Traceback" not in text
    assert await etcd_resources.get_broker(info["broker_id"]) is None


def test_losing_etcd_for_a_whole_ttl_exits_non_zero(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    etcd = EtcdProcess().start()
    try:
        ready, log = tmp_path / "broker.json", tmp_path / "broker.log"
        proc = start(
            etcd,
            "lost",
            ready,
            log,
            DANUBE_BROKER_REGISTRATION_TTL_S="2",
            DANUBE_BROKER_ETCD__REQUEST_TIMEOUT_S="1",
        )
        procs.append(proc)
        wait_until_sync(lambda: ready.exists() or proc.poll() is not None, timeout_s=30, what="ready file")
        assert proc.poll() is None, log.read_text()
        etcd.stop()
        code = proc.wait(timeout=30)
        assert code != 0, log.read_text()
        assert "lease" in log.read_text().lower()
    finally:
        etcd.stop()


def test_port_in_use_exits_1(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        argv = [sys.executable, "-m", "danube_broker", "--listen", f"127.0.0.1:{port}",
                "--etcd-endpoints", etcd_server.endpoint, "--cluster", cluster_name]  # fmt: skip
        res = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=60)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
