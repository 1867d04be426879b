"""A real crash of the local backend's writer: ``kill -9`` in the middle of copying a file in.

Not marked ``unit``: it runs a child process. It needs no network and takes well under a second.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
from pathlib import Path

from danube_common.objstore.base import TMP_SEGMENT_PREFIX
from danube_common.objstore.local import LocalObjectStore
from tests.support import wait_until


def _temps(root: Path) -> list[Path]:
    return sorted(root.rglob(f"{TMP_SEGMENT_PREFIX}*"))


_CHILD = """
import asyncio, sys
from danube_common.objstore.local import LocalObjectStore

async def main() -> None:
    store = await LocalObjectStore.open(sys.argv[1])
    await store.put_file("seg/1", sys.argv[2], if_absent=True)

asyncio.run(main())
"""


def _open_writer(fifo: Path) -> int | None:
    """The FIFO's write end once the child has opened it for reading (never blocks)."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return None
        raise


async def test_kill_9_mid_write_leaves_no_partial_object(tmp_path: Path) -> None:
    """A real crash: a child process is killed while it copies a file in."""
    root = tmp_path / "objects"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", _CHILD, str(root), str(fifo))
    writer: int | None = None
    try:
        writer = await wait_until(lambda: _open_writer(fifo), timeout_s=20, what="the child to open the pipe")
        os.write(writer, b"x" * 32_000)  # fits in the pipe's buffer: never blocks
        await wait_until(
            lambda: [p for p in _temps(root) if p.stat().st_size > 0],
            timeout_s=20,
            what="the child's temp file",
        )
        child.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(child.wait(), 10) == -signal.SIGKILL
    finally:
        if writer is not None:
            os.close(writer)
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert not (root / "seg/1").exists()
    assert len(_temps(root)) == 1

    store = await LocalObjectStore.open(root)  # cleans the dead child's temp file
    assert _temps(root) == []
    assert await store.list() == []
    await store.put("seg/1", b"uploaded again", if_absent=True)  # the key is still free
    assert await store.get("seg/1") == b"uploaded again"
