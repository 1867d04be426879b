"""A watch survives an etcd restart: it resumes after the last delivered revision.

etcd is stopped (SIGTERM, or SIGKILL for a crash) and a new etcd process is started on the
same ports and data directory. Events written before the outage (including ones the
consumer had not yet pulled) and after it must all arrive, each exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from danube_common.errors import DanubeError
from danube_common.etcd_server import EtcdProcess
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.store import WatchEvent
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed: run ./test.sh (it installs etcd-server)")
    proc = EtcdProcess(data_dir=tmp_path / "data", log_path=tmp_path / "etcd.log")
    proc.start()
    yield proc
    proc.stop()  # idempotent: the test may have stopped it already


def _restart(old: EtcdProcess, tmp_path: Path, *, crash: bool) -> EtcdProcess:
    if crash:
        assert old.proc is not None
        old.proc.kill()
        old.proc.wait(timeout=10)
    old.stop()
    new = EtcdProcess(
        data_dir=old.data_dir,
        client_port=old.client_port,
        peer_port=old.peer_port,
        log_path=tmp_path / "etcd-restarted.log",
    )
    return new.start()


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
async def test_watch_resumes_after_etcd_restart(etcd: EtcdProcess, tmp_path: Path, crash: bool) -> None:
    store = EtcdStore([etcd.endpoint], request_timeout_s=2.0, watch_retry_max_s=0.2)
    await store.wait_ready(10)
    prefix = "/resume/"
    events: list[WatchEvent] = []
    gate = asyncio.Event()  # the consumer pulls the next event only while the gate is open
    gate.set()

    async def consume(start: int) -> None:
        async for ev in store.watch_prefix(prefix, start_revision=start):
            events.append(ev)
            await gate.wait()

    start = await store.put("/outside", b"") + 1
    task = asyncio.create_task(consume(start))
    new_etcd: EtcdProcess | None = None
    try:
        written: list[tuple[str, int]] = []
        for i in range(3):
            written.append((f"{prefix}before/{i}", await store.put(f"{prefix}before/{i}", str(i))))
        await wait_until(lambda: len(events) == 3, what="the first three events")

        # Hold the consumer, write more, and take etcd away before it reads them.
        gate.clear()
        for i in range(3, 6):
            written.append((f"{prefix}before/{i}", await store.put(f"{prefix}before/{i}", str(i))))
        await wait_until(lambda: len(events) >= 4, what="the consumer to hold one event")
        new_etcd = _restart(etcd, tmp_path, crash=crash)
        gate.set()

        async def put_after_restart(i: int) -> int:
            return await store.put(f"{prefix}after/{i}", str(i))

        for i in range(3):
            key = f"{prefix}after/{i}"
            rev = await wait_until(
                lambda i=i: _try(put_after_restart(i)), timeout_s=15, what="etcd to accept writes again"
            )
            written.append((key, rev))
        await wait_until(
            lambda: len(events) >= len(written), timeout_s=15, what="every event after the restart"
        )

        got = [(e.key, e.revision) for e in events]
        assert got == written, "no event lost, repeated or reordered across the restart"
        assert all(e.kind == "put" for e in events)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.aclose()
        if new_etcd is not None:
            new_etcd.stop()


async def _try(coro: object) -> int | None:
    """Await ``coro``; None (poll again) while etcd is still coming back."""
    try:
        return await coro  # type: ignore[misc, no-any-return]
    except DanubeError:
        return None
