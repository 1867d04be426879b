"""A TCP proxy on a free loopback port that misbehaves on demand, for fault tests.

Put it between a client and a server (e.g. the S3 backend and ``moto_server``) and switch its
mode at any time; the switch applies to new and existing connections at once:

- ``pass``: forward bytes both ways.
- ``refuse``: reset (RST) every open connection now, and every new one as soon as it is accepted.
- ``blackhole``: accept and read, never forward, never answer: the client waits for its timeout.
  Connections that lost bytes this way are reset when the mode goes back to ``pass`` (their
  protocol stream is broken), idle ones keep working.
- ``fail_after_bytes``: forward until a connection has carried ``fail_after_bytes`` bytes (both
  directions counted), then reset it: an upload or download broken in the middle.

::

    async with FaultyProxy("127.0.0.1", moto.port) as proxy:
        cfg = S3Config(endpoint_url=proxy.endpoint_url, ...)
        proxy.set_mode("blackhole")
        ...
        proxy.set_mode("pass")

Every connection's tasks are owned by the proxy; ``aclose`` resets and awaits them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["pass", "refuse", "blackhole", "fail_after_bytes"]
_MODES: tuple[Mode, ...] = ("pass", "refuse", "blackhole", "fail_after_bytes")
_CHUNK_BYTES = 64 * 1024


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close a connection with a TCP reset (not an orderly FIN), dropping unsent bytes."""
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    #: Bytes forwarded in both directions.
    carried_bytes: int = 0
    #: Some bytes were swallowed (blackhole): the stream is no longer usable.
    tainted: bool = False
    closed: bool = field(default=False)

    def reset(self) -> None:
        self.closed = True
        _reset(self.client)
        _reset(self.upstream)

    def close(self) -> None:
        """Orderly close of both sides (what is already written still gets delivered)."""
        self.closed = True
        for writer in (self.client, self.upstream):
            if writer is not None and not writer.transport.is_closing():
                writer.close()


class FaultyProxy:
    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.host = host
        self.port = port
        self.connect_timeout_s = connect_timeout_s
        self.mode: Mode = "pass"
        self.fail_after_bytes: int | None = None
        #: Connections accepted so far (all modes).
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> FaultyProxy:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def set_mode(self, mode: Mode, *, fail_after_bytes: int | None = None) -> None:
        if mode not in _MODES:
            raise ValueError(f"unknown proxy mode {mode!r}: use one of {', '.join(_MODES)}")
        if mode == "fail_after_bytes" and (fail_after_bytes is None or fail_after_bytes < 0):
            raise ValueError("mode fail_after_bytes needs fail_after_bytes=N (N >= 0)")
        self.mode = mode
        self.fail_after_bytes = fail_after_bytes if mode == "fail_after_bytes" else None
        for conn in list(self._conns):
            if self._must_reset(conn):
                conn.reset()

    def _must_reset(self, conn: _Conn) -> bool:
        """Whether an open connection breaks when the mode changes to the current one."""
        if self.mode == "refuse":
            return True
        if self.mode == "pass":
            return conn.tainted
        if self.mode == "fail_after_bytes":
            return conn.carried_bytes >= (self.fail_after_bytes or 0)
        return False

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.reset()
        # Reset connections end their handlers at once; cancel any still connecting upstream.
        if self._handlers:
            _, pending = await asyncio.wait(list(self._handlers), timeout=2.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FaultyProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ connections

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        conn = _Conn(writer)
        self._conns.add(conn)
        self.accepted += 1
        try:
            if self.mode == "refuse":
                conn.reset()
                return
            up_reader: asyncio.StreamReader | None = None
            if self.mode != "blackhole":
                try:
                    up_reader, conn.upstream = await asyncio.wait_for(
                        asyncio.open_connection(self.upstream_host, self.upstream_port),
                        self.connect_timeout_s,
                    )
                except (OSError, TimeoutError):
                    conn.reset()
                    return
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._pump(conn, reader, conn.upstream))
                if up_reader is not None:
                    tg.create_task(self._pump(conn, up_reader, writer))
        except asyncio.CancelledError:
            # Only aclose cancels a handler; end quietly (asyncio's stream callback logs a
            # cancelled handler task as an error).
            conn.reset()
        finally:
            if conn.closed:
                conn.close()  # one side ended in order: close the other the same way
            else:
                conn.reset()
            self._conns.discard(conn)
            self._handlers.discard(task)

    async def _pump(self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter | None) -> None:
        try:
            await self._forward(conn, src, dst)
        except OSError:  # reset by a peer, or written after we reset it
            conn.reset()

    async def _forward(
        self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter | None
    ) -> None:
        while not conn.closed:
            data = await src.read(_CHUNK_BYTES)
            if not data:
                # One side closed: close the other in order (HTTP needs no half-close).
                if dst is None:
                    conn.reset()
                else:
                    conn.close()
                return
            if self.mode == "refuse":
                conn.reset()
                return
            if self.mode == "blackhole" or dst is None:
                conn.tainted = True
                continue
            if self.mode == "fail_after_bytes" and self.fail_after_bytes is not None:
                room = self.fail_after_bytes - conn.carried_bytes
                if len(data) >= room:
                    dst.write(data[: max(room, 0)])
                    conn.carried_bytes += max(room, 0)
                    with contextlib.suppress(OSError):
                        await dst.drain()
                    conn.reset()
                    return
            dst.write(data)
            conn.carried_bytes += len(data)
            await dst.drain()
