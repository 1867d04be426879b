"""`danube-lookup` as a process: the CLI contract the launcher relies on (ready file, signals)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from tests.support import wait_until_sync

pytestmark = pytest.mark.integration

LOOKUP = Path(sys.executable).parent / "danube-lookup"


def start(etcd: EtcdProcess, cluster: str, ready: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(LOOKUP),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--etcd-endpoints",
            etcd.endpoint,
            "--cluster",
            cluster,
            "--ready-file",
            str(ready),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ready_file_then_graceful_stop(
    etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path, sig: signal.Signals
) -> None:
    ready = tmp_path / "run" / "lookup.json"
    proc = start(etcd_server, cluster_name, ready)
    try:
        wait_until_sync(lambda: ready.exists() or proc.poll() is not None, timeout_s=20, what="ready file")
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        info = json.loads(ready.read_text())
        assert set(info) == {"service", "addr", "url", "admin_addr", "admin_url", "pid"}
        assert info["service"] == "lookup" and info["pid"] == proc.pid
        assert info["url"] == f"http://{info['addr']}" and info["admin_url"] == f"http://{info['admin_addr']}"
        assert info["addr"].startswith("127.0.0.1:") and not info["addr"].endswith(":0")

        with grpc.insecure_channel(info["admin_addr"]) as ch:
            names = apb_grpc.NamespaceAdminStub(ch).ListNamespaces(apb.ListNamespacesRequest(), timeout=5)
            assert list(names.namespaces) == ["default"]
        with grpc.insecure_channel(info["addr"]) as ch:
            parts = pb_grpc.DiscoveryStub(ch).TopicPartitions(
                pb.TopicLookupRequest(topic="/default/x"), timeout=5
            )
            assert list(parts.partitions) == []

        proc.send_signal(sig)
        assert proc.wait(timeout=15) == 0
        assert not ready.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_unreachable_etcd_fails_with_a_hint(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            str(LOOKUP),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--etcd-endpoints",
            "127.0.0.1:1",
        ],
        env={"DANUBE_LOOKUP_ETCD__CONNECT_TIMEOUT_S": "0.5", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert "error: etcd at 127.0.0.1:1 not reachable" in out.stderr and "hint:" in out.stderr
    assert "Traceback" not in out.stderr


def test_bad_flag_value_exits_2() -> None:
    out = subprocess.run([str(LOOKUP), "--listen", "nowhere"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "error: invalid configuration: listen_addr" in out.stderr
