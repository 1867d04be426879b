"""The local-directory backend: objects are files under a root, at their key's path.

Key ``a/b/c.seg`` (with the configured prefix ``p/``) lives at ``<root>/p/a/b/c.seg``, so the
directory mirrors a bucket and can be copied to S3 as it is (``aws s3 sync <root> s3://bucket``).
This is the embedded default of ``danube-local``; it needs a POSIX filesystem with hard links.

**Crash safety.** A write goes to a temporary file in the destination directory (named
``.danube-tmp.<host>.<pid>.<process-tag>.<random>``), is fsynced, then takes the final name in
one step (``os.link`` for ``if_absent``, which fails if the name exists; ``os.replace``
otherwise), and the directory is fsynced. A reader or ``list`` therefore never sees a partial
object, even after ``kill -9`` or a power loss mid-write: at worst a temporary file is left.
Temporary files are never listed; ``open`` removes those whose writer is gone (same host and
its process no longer runs, or any host and older than a day).

**Deviations from S3**, both from files and directories sharing one namespace:

- a key cannot be a "directory" of another: with ``a/b`` stored, ``a/b/c`` cannot be (and the
  reverse); such a put raises ``InvalidObjectKey`` and says why. Danube's own keys never clash.
- each segment is limited to the filesystem's name length (255 bytes on Linux).

ETags are ``<inode>-<mtime_ns>-<size>`` in hex: a rewrite (even with the same bytes) changes
them. Deleting leaves empty directories behind; ``list`` ignores them.

Tracing: while a sampled span is current, each operation is a CLIENT child span named like S3's
(``local PutObject``, ``local GetObject``, ...) with the root and key.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import hashlib
import logging
import os
import secrets
import socket
import stat
import time
from collections.abc import Callable
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

from opentelemetry.trace import SpanKind

from danube_common.objstore.base import (
    TMP_SEGMENT_PREFIX,
    ObjectInfo,
    ObjectStore,
    check_limit,
    check_range,
    clamp_range,
    full_key,
    validate_key,
    validate_prefix,
)
from danube_common.objstore.errors import (
    InvalidObjectKey,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreDiskFull,
    ObjectStoreError,
    ObjectStoreUnavailable,
    PreconditionFailed,
)
from danube_common.observability import tracing

log = logging.getLogger(__name__)

T = TypeVar("T")
_TRACER_NAME = "danube.objstore"

_COPY_CHUNK_BYTES = 1024 * 1024
#: Temporary files older than this are removed at open whatever wrote them.
STALE_TMP_AGE_S = 24 * 3600.0
_HOST_TAG = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
#: Tells this process's temporary files from those of an earlier process with the same pid.
_PROCESS_TAG = secrets.token_hex(4)


def temp_name(*, host_tag: str = _HOST_TAG, pid: int | None = None, process_tag: str = _PROCESS_TAG) -> str:
    """A fresh temporary file name for a write by this process."""
    pid = os.getpid() if pid is None else pid
    return f"{TMP_SEGMENT_PREFIX}{host_tag}.{pid}.{process_tag}.{secrets.token_hex(6)}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def is_stale_temp(
    name: str,
    *,
    age_s: float,
    host_tag: str = _HOST_TAG,
    pid: int | None = None,
    process_tag: str = _PROCESS_TAG,
    pid_alive: Callable[[int], bool] = _pid_alive,
) -> bool:
    """Whether the temporary file ``name`` (``age_s`` old) belongs to a writer that is gone."""
    if not name.startswith(TMP_SEGMENT_PREFIX):
        return False
    if age_s > STALE_TMP_AGE_S:
        return True
    parts = name[len(TMP_SEGMENT_PREFIX) :].split(".")
    if len(parts) != 4 or not parts[1].isdigit():
        return False  # not ours, or a future format: leave it to the age rule
    their_host, their_pid, their_process = parts[0], int(parts[1]), parts[2]
    if their_process == process_tag:
        return False  # a write in flight in this very process
    if their_host != host_tag:
        return False  # another machine sharing the directory: only the age rule applies
    me = os.getpid() if pid is None else pid
    # Same pid, different process tag: an earlier process that had our pid (e.g. pid 1 in a
    # container) and is gone.
    return their_pid == me or not pid_alive(their_pid)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _info(key: str, st: os.stat_result) -> ObjectInfo:
    return ObjectInfo(
        key=key,
        size=st.st_size,
        etag=f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}",
        last_modified=datetime.fromtimestamp(st.st_mtime_ns / 1e9, tz=UTC),
    )


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root`` (see the module docstring). Build with :meth:`open`."""

    def __init__(self, root: str | PathLike[str], *, prefix: str = "") -> None:
        if prefix and not prefix.endswith("/"):
            raise InvalidObjectKey(f"invalid prefix {prefix!r}: it must be empty or end with '/'")
        if prefix:
            validate_key(prefix[:-1])
        self.root = Path(root).absolute()
        self.prefix = prefix
        self._closed = False

    @classmethod
    async def open(cls, root: str | PathLike[str], *, prefix: str = "") -> LocalObjectStore:
        """Create ``root`` if needed and remove temporary files left by crashed writers."""
        store = cls(root, prefix=prefix)
        await asyncio.to_thread(store._open_sync)
        return store

    def __repr__(self) -> str:
        return f"LocalObjectStore(root={str(self.root)!r}, prefix={self.prefix!r})"

    # ------------------------------------------------------------------ the interface

    async def put(self, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        full_key(self.prefix, key)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"put needs bytes, got {type(data).__name__}")
        self._check_open()

        def write(fd: int) -> None:
            _write_all(fd, data)

        return await self._run("PutObject", key, self._write_sync, key, write, if_absent)

    async def put_file(self, key: str, path: str | PathLike[str], *, if_absent: bool = False) -> ObjectInfo:
        """Copy the file at ``path`` in. An ``OSError`` about ``path`` itself (missing,
        unreadable) propagates unchanged: it is the caller's file, not the store's."""
        full_key(self.prefix, key)
        self._check_open()
        return await self._run("PutObject", key, self._put_file_sync, key, Path(path), if_absent)

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        full_key(self.prefix, key)
        lo, hi = check_range(key, start, end)
        self._check_open()
        return await self._run("GetObject", key, self._get_sync, key, lo, hi)

    async def head(self, key: str) -> ObjectInfo:
        full_key(self.prefix, key)
        self._check_open()
        return await self._run("HeadObject", key, self._head_sync, key)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[ObjectInfo]:
        validate_prefix(prefix)
        check_limit(limit)
        self._check_open()
        if limit == 0:
            return []
        return await self._run("ListObjects", prefix + "*", self._list_sync, prefix, start_after, limit)

    async def delete(self, key: str) -> None:
        full_key(self.prefix, key)
        self._check_open()
        await self._run("DeleteObject", key, self._delete_sync, key)

    async def aclose(self) -> None:
        self._closed = True

    async def _run(self, operation: str, key: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a thread; a CLIENT child span (``local PutObject`` ...) when a sampled
        span is current (the same operation names as S3's)."""
        if not tracing.in_sampled_span():
            return await asyncio.to_thread(fn, *args)
        attrs = {"danube.objstore.root": str(self.root), "danube.objstore.key": self.prefix + key}
        with tracing.tracer(_TRACER_NAME).start_as_current_span(
            f"local {operation}", kind=SpanKind.CLIENT, attributes=attrs
        ):
            return await asyncio.to_thread(fn, *args)

    # ------------------------------------------------------------------ helpers (run in threads)

    def _check_open(self) -> None:
        if self._closed:
            raise ObjectStoreUnavailable(f"{self!r} is closed (the process is shutting down?)")

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*(self.prefix + key).split("/"))

    def _error(self, exc: OSError, op: str, key: str | None) -> ObjectStoreError:
        """Translate an OSError of the store's own files into our errors."""
        where = f"{key!r} under {self.root}" if key is not None else str(self.root)
        what = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return ObjectStoreDiskFull(f"local object store {op} of {where}: disk full: {what}")
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return ObjectStoreAccessDenied(
                f"local object store {op} of {where}: {what}; check that local_dir ({self.root}) "
                "exists, is writable by this process's user and is not on a read-only filesystem"
            )
        if exc.errno == errno.ENAMETOOLONG:
            return InvalidObjectKey(
                f"local object store cannot store {key!r}: a segment is longer than the filesystem "
                "allows (255 bytes on Linux); use shorter segments"
            )
        return ObjectStoreUnavailable(f"local object store {op} of {where} failed: {what}")

    def _conflict(self, key: str, other: Path) -> InvalidObjectKey:
        rel = other.relative_to(self.root).as_posix()
        kind = "a directory of other keys" if other.is_dir() else "an object"
        return InvalidObjectKey(
            f"local object store cannot store {key!r}: {rel!r} is {kind}, and a name cannot be both a "
            "file and a directory (S3 allows it, the local directory backend does not); choose keys "
            "where no key is another key followed by '/'"
        )

    def _open_sync(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise ObjectStoreAccessDenied(
                f"local_dir {self.root} exists but is not a directory: point local_dir at a directory"
            )
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(exc, "open", None) from exc
        now = time.time()
        removed = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if not name.startswith(TMP_SEGMENT_PREFIX):
                    continue
                path = Path(dirpath) / name
                try:
                    age_s = now - path.stat().st_mtime
                    if is_stale_temp(name, age_s=age_s):
                        path.unlink()
                        removed += 1
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    log.warning("cannot remove stale temporary file %s: %s", path, exc.strerror)
        if removed:
            log.info(
                "local object store %s: removed %d temporary file(s) left by crashed writers",
                self.root,
                removed,
            )

    def _ensure_dir(self, key: str, directory: Path) -> None:
        """Create ``directory`` and its missing parents, making each new entry durable.

        Safe against concurrent writers creating the same directories.
        """
        if directory.is_dir():
            return
        cur = self.root
        for part in directory.relative_to(self.root).parts:
            cur = cur / part
            try:
                cur.mkdir()
            except FileExistsError:
                if not cur.is_dir():
                    raise self._conflict(key, cur) from None
                continue
            except NotADirectoryError as exc:
                raise self._conflict(key, cur.parent) from exc
            _fsync_dir(cur.parent)

    def _write_sync(self, key: str, write: Callable[[int], None], if_absent: bool) -> ObjectInfo:
        final = self._path(key)
        if if_absent and final.is_file():  # fail before copying; os.link below is the real guard
            raise PreconditionFailed(
                f"{key!r} already exists (if_absent write to {self.root}); nothing was written"
            )
        try:
            self._ensure_dir(key, final.parent)
            tmp = final.parent / temp_name()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                try:
                    write(fd)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                if if_absent:
                    try:
                        os.link(tmp, final)
                    except FileExistsError:
                        if final.is_dir():
                            raise self._conflict(key, final) from None
                        raise PreconditionFailed(
                            f"{key!r} already exists (if_absent write to {self.root}); nothing was written"
                        ) from None
                else:
                    try:
                        os.replace(tmp, final)
                    except IsADirectoryError:
                        raise self._conflict(key, final) from None
            finally:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass  # os.replace moved it
            _fsync_dir(final.parent)
            return _info(key, os.stat(final))
        except OSError as exc:
            raise self._error(exc, "put", key) from exc

    def _put_file_sync(self, key: str, path: Path, if_absent: bool) -> ObjectInfo:
        src = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # the caller's errors, raised as they are
        try:

            def copy(fd: int) -> None:
                while chunk := os.read(src, _COPY_CHUNK_BYTES):
                    _write_all(fd, chunk)

            return self._write_sync(key, copy, if_absent)
        finally:
            os.close(src)

    def _open_object(self, key: str) -> int:
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise ObjectNotFound(f"no object {key!r} under {self.root}") from exc
        except OSError as exc:
            raise self._error(exc, "get", key) from exc
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise ObjectNotFound(f"no object {key!r} under {self.root} (it is a directory of other keys)")
        return fd

    def _get_sync(self, key: str, start: int, end: int | None) -> bytes:
        fd = self._open_object(key)
        try:
            size = os.fstat(fd).st_size
            lo, hi = clamp_range(key, start, end, size)
            chunks: list[bytes] = []
            pos = lo
            while pos < hi:
                chunk = os.pread(fd, hi - pos, pos)
                if not chunk:
                    break  # cannot happen for an immutable file; do not spin if it does
                chunks.append(chunk)
                pos += len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise self._error(exc, "get", key) from exc
        finally:
            os.close(fd)

    def _head_sync(self, key: str) -> ObjectInfo:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ObjectNotFound(f"no object {key!r} under {self.root}") from exc
        except OSError as exc:
            raise self._error(exc, "head", key) from exc
        if not stat.S_ISREG(st.st_mode):
            raise ObjectNotFound(f"no object {key!r} under {self.root} (it is a directory of other keys)")
        return _info(key, st)

    def _list_sync(
        self, prefix: str, start_after: str | None, limit: int | None
    ) -> builtins.list[ObjectInfo]:
        full_prefix = self.prefix + prefix
        # Walk only the deepest directory the prefix names in full.
        base_rel = full_prefix.rpartition("/")[0]
        base = self.root.joinpath(*base_rel.split("/")) if base_rel else self.root
        skip = len(self.prefix)
        found: list[tuple[str, Path]] = []

        def on_error(exc: OSError) -> None:
            if not isinstance(exc, FileNotFoundError | NotADirectoryError):
                raise exc

        try:
            for dirpath, _dirs, files in os.walk(base, onerror=on_error):
                rel_dir = Path(dirpath).relative_to(self.root).as_posix()
                for name in files:
                    if name.startswith(TMP_SEGMENT_PREFIX):
                        continue
                    full = name if rel_dir == "." else f"{rel_dir}/{name}"
                    if not full.startswith(full_prefix):
                        continue
                    key = full[skip:]
                    if start_after is not None and key <= start_after:
                        continue
                    found.append((key, Path(dirpath) / name))
            # Python orders str by code point, which is the UTF-8 byte order S3 uses.
            found.sort(key=lambda item: item[0])
            out: list[ObjectInfo] = []
            for key, path in found:
                if limit is not None and len(out) >= limit:
                    break
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue  # deleted while we listed
                if stat.S_ISREG(st.st_mode):
                    out.append(_info(key, st))
            return out
        except OSError as exc:
            raise self._error(exc, "list", prefix) from exc

    def _delete_sync(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return
        except OSError as exc:
            raise self._error(exc, "delete", key) from exc
        try:
            _fsync_dir(path.parent)
        except OSError as exc:
            raise self._error(exc, "delete", key) from exc
