"""Process helpers shared by the peer drivers: free loopback ports, port probes, and stopping a
child's whole process group (servers are started with ``start_new_session=True``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A free port for a peer server, below the kernel's ephemeral range when the danube packages
    are installed (danube_common.etcd_server.free_port: the harness's own connections cannot take
    it before the server binds it); else whatever ``bind`` to port 0 gives."""
    try:
        from danube_common.etcd_server import free_port as below_ephemeral
    except ImportError:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    return below_ephemeral(host)


async def port_open(host: str, port: int) -> bool:
    try:
        _reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def stop_process_group(proc: asyncio.subprocess.Process, *, timeout_s: float) -> None:
    """SIGTERM the child's process group, wait, then SIGKILL whatever is left of it."""
    pgid = proc.pid  # started with start_new_session: pgid == pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    await proc.wait()
