"""The local-directory backend beyond the contract suite: crash safety of its atomic writes,
clean-up of temporary files, races between writers, and translation of OS errors."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest

from danube_common.objstore import (
    InvalidObjectKey,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreDiskFull,
    ObjectStoreUnavailable,
    PreconditionFailed,
)
from danube_common.objstore import local as local_mod
from danube_common.objstore.base import TMP_SEGMENT_PREFIX
from danube_common.objstore.local import LocalObjectStore, is_stale_temp, temp_name
from tests.support import wait_until

pytestmark = pytest.mark.unit


def _temps(root: Path) -> list[Path]:
    return sorted(root.rglob(f"{TMP_SEGMENT_PREFIX}*"))


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    s = await LocalObjectStore.open(tmp_path / "objects")
    yield s
    await s.aclose()


# ---------------------------------------------------------------- layout


async def test_objects_are_plain_files_at_their_key(tmp_path: Path) -> None:
    store = await LocalObjectStore.open(tmp_path, prefix="pfx/")
    await store.put("topics/ns/t/0001.seg", b"abc")
    assert (tmp_path / "pfx/topics/ns/t/0001.seg").read_bytes() == b"abc"
    # ... and a file copied in by hand is an object (the directory mirrors a bucket).
    (tmp_path / "pfx/topics/ns/t/0002.seg").write_bytes(b"by hand")
    assert [o.key for o in await store.list("topics/")] == ["topics/ns/t/0001.seg", "topics/ns/t/0002.seg"]
    assert await store.get("topics/ns/t/0002.seg") == b"by hand"
    assert _temps(tmp_path) == []


async def test_a_directory_is_not_an_object(store: LocalObjectStore) -> None:
    await store.put("a/b/c", b"x")
    with pytest.raises(ObjectNotFound, match="directory"):
        await store.get("a/b")
    with pytest.raises(ObjectNotFound):
        await store.head("a/b")
    await store.delete("a/b")  # nothing to delete: fine
    assert await store.get("a/b/c") == b"x"


async def test_etag_changes_on_rewrite_with_the_same_bytes(store: LocalObjectStore) -> None:
    a = await store.put("k", b"same")
    b = await store.put("k", b"same")
    assert a.etag != b.etag
    assert (await store.head("k")).etag == b.etag


# ---------------------------------------------------------------- crash safety


async def test_a_write_in_progress_is_invisible_until_complete(
    store: LocalObjectStore, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    upload = asyncio.create_task(store.put_file("seg/1", fifo))
    writer = await asyncio.to_thread(open, fifo, "wb")
    try:
        writer.write(b"first half|")
        writer.flush()
        await wait_until(lambda: [p for p in _temps(store.root) if p.stat().st_size > 0], what="a temp file")
        assert await store.list() == []
        with pytest.raises(ObjectNotFound):
            await store.head("seg/1")
        assert not (store.root / "seg/1").exists()
        writer.write(b"second half")
    finally:
        writer.close()
    info = await upload
    assert info.size == len(b"first half|second half")
    assert await store.get("seg/1") == b"first half|second half"
    assert _temps(store.root) == []


def _dead_pid() -> int:
    """A pid no process can have (above the kernel's pid_max)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


async def test_temp_files_left_by_a_crash_are_ignored_by_list_and_cleaned_on_open(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    store = await LocalObjectStore.open(root)
    await store.put("seg/1", b"complete")
    d = root / "seg"
    crashed = d / temp_name(pid=_dead_pid(), process_tag="dead0001")  # this host, process gone
    old_pid_reused = d / temp_name(pid=os.getpid(), process_tag="prev0001")  # an earlier us
    other_host = d / temp_name(host_tag="0therh0s", pid=1, process_tag="remote01")  # maybe in flight
    other_host_old = d / temp_name(host_tag="0therh0s", pid=1, process_tag="remote02")
    ours = d / temp_name()  # a write in flight in this process
    for p in (crashed, old_pid_reused, other_host, other_host_old, ours):
        p.write_bytes(b"partial")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(other_host_old, (two_days_ago, two_days_ago))

    assert [o.key for o in await store.list()] == ["seg/1"]
    with pytest.raises(InvalidObjectKey):
        await store.get(f"seg/{crashed.name}")  # temp names are not keys

    reopened = await LocalObjectStore.open(root)
    assert sorted(p.name for p in _temps(root)) == sorted([other_host.name, ours.name])
    assert await reopened.get("seg/1") == b"complete"


@pytest.mark.parametrize(
    ("name", "age_s", "alive", "stale"),
    [
        ("seg-0001", 10**9, False, False),  # not a temp file at all
        (f"{TMP_SEGMENT_PREFIX}hhhhhhhh.123.other000.abc", 1.0, False, True),  # same host, pid gone
        (f"{TMP_SEGMENT_PREFIX}hhhhhhhh.123.other000.abc", 1.0, True, False),  # same host, pid alive
        (f"{TMP_SEGMENT_PREFIX}hhhhhhhh.999.other000.abc", 1.0, True, True),  # our pid, not our process
        (f"{TMP_SEGMENT_PREFIX}hhhhhhhh.999.mine0000.abc", 1.0, False, False),  # our own write
        (f"{TMP_SEGMENT_PREFIX}xxxxxxxx.123.other000.abc", 1.0, False, False),  # another host
        (f"{TMP_SEGMENT_PREFIX}xxxxxxxx.123.other000.abc", 3 * 86400.0, True, True),  # ... but old
        (f"{TMP_SEGMENT_PREFIX}garbage", 1.0, False, False),  # unknown format: age rule only
    ],
)
def test_stale_temp_rules(name: str, age_s: float, alive: bool, stale: bool) -> None:
    got = is_stale_temp(
        name, age_s=age_s, host_tag="hhhhhhhh", pid=999, process_tag="mine0000", pid_alive=lambda _pid: alive
    )
    assert got is stale


# ---------------------------------------------------------------- races


async def test_concurrent_if_absent_writes_have_exactly_one_winner(store: LocalObjectStore) -> None:
    async def attempt(i: int) -> int | None:
        try:
            await store.put("race/k", f"writer {i}".encode() * 1000, if_absent=True)
            return i
        except PreconditionFailed:
            return None

    results = await asyncio.gather(*(attempt(i) for i in range(16)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert await store.get("race/k") == f"writer {winners[0]}".encode() * 1000
    assert _temps(store.root) == []


async def test_concurrent_overwrites_leave_one_whole_version(store: LocalObjectStore) -> None:
    payloads = [bytes([i]) * 200_000 for i in range(8)]
    await asyncio.gather(*(store.put("race/o", p) for p in payloads))
    assert await store.get("race/o") in payloads
    assert _temps(store.root) == []


# ---------------------------------------------------------------- OS errors


@pytest.mark.parametrize(
    ("err", "cls", "text"),
    [
        (errno.ENOSPC, ObjectStoreDiskFull, "disk full"),
        (errno.EDQUOT, ObjectStoreDiskFull, "disk full"),
        (errno.EACCES, ObjectStoreAccessDenied, "local_dir"),
        (errno.EROFS, ObjectStoreAccessDenied, "read-only"),
        (errno.EIO, ObjectStoreUnavailable, "failed"),
    ],
)
async def test_os_errors_while_writing_are_translated_and_leave_nothing(
    store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch, err: int, cls: type[Exception], text: str
) -> None:
    def failing_write(fd: int, data: Any) -> None:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(local_mod, "_write_all", failing_write)
    with pytest.raises(cls, match=text) as caught:
        await store.put("e/k", b"data")
    assert isinstance(caught.value.__cause__, OSError)
    assert _temps(store.root) == []
    with pytest.raises(ObjectNotFound):
        await store.head("e/k")


def test_disk_full_is_the_catalogue_disk_full() -> None:
    from danube_common.errors import DiskFull

    assert issubclass(ObjectStoreDiskFull, DiskFull) and ObjectStoreDiskFull.retryable


async def test_a_segment_too_long_for_the_filesystem_is_an_invalid_key(store: LocalObjectStore) -> None:
    with pytest.raises(InvalidObjectKey, match="255 bytes"):
        await store.put("a/" + "x" * 300, b"x")


async def test_local_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(ObjectStoreAccessDenied, match="not a directory"):
        await LocalObjectStore.open(tmp_path / "f")


async def test_a_closed_store_refuses_calls(store: LocalObjectStore) -> None:
    await store.aclose()
    with pytest.raises(ObjectStoreUnavailable, match="closed"):
        await store.get("k")
