"""free_port: ports below the kernel's ephemeral range, free, and not handed out twice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from danube_common import etcd_server
from danube_common.etcd_server import PICK_FROM, free_port

pytestmark = pytest.mark.unit


def set_range(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> None:
    f = tmp_path / "ip_local_port_range"
    f.write_text(text)
    monkeypatch.setattr(etcd_server, "EPHEMERAL_RANGE_FILE", f)


def test_ports_come_from_below_the_ephemeral_range_and_are_free(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    set_range(monkeypatch, tmp_path, "32768\t60999\n")
    ports = [free_port() for _ in range(50)]
    assert all(PICK_FROM <= p < 32768 for p in ports), ports
    assert len(set(ports)) == 50  # never the same one twice
    for p in ports[:5]:  # each one can be bound (listened on) at once
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
            s.listen()


def test_a_port_a_server_holds_is_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    set_range(monkeypatch, tmp_path, "32768 60999")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        choices = iter([taken, taken, 20000 if taken != 20000 else 20001])
        monkeypatch.setattr(etcd_server.random, "randrange", lambda a, b: next(choices))
        etcd_server._handed_out.clear()
        assert free_port() in (20000, 20001)


@pytest.mark.parametrize("text", ["1024 65535", "garbage", None])
def test_without_room_below_the_range_the_kernel_chooses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str | None
) -> None:
    if text is None:
        monkeypatch.setattr(etcd_server, "EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    else:
        set_range(monkeypatch, tmp_path, text)
    monkeypatch.setattr(etcd_server.random, "randrange", lambda a, b: pytest.fail("picked from a range"))
    port = free_port()
    assert 0 < port < 65536
