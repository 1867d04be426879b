"""The object store interface, the rules every backend shares, and pure helpers.

Semantics (the contract suite checks both backends against them):

- **Keys** are '/'-separated segments, e.g. ``topics/ns/t/00000000000000000042.seg``: no leading
  '/', no empty, '.' or '..' segment, no control character, at most 1024 bytes in UTF-8, and no
  segment starting with ``.danube-tmp.`` (the local backend's temporary files). The configured
  ``prefix`` is prepended to every key and stripped from listed keys: callers never see it.
- **Writes are whole and atomic**: a reader sees the old object, the new one, or none, never a
  part. ``if_absent=True`` writes only if the key is free, else raises ``PreconditionFailed``
  and changes nothing. Re-uploading the same bytes to the same key (``if_absent=False``) is
  harmless, which makes uploads with deterministic keys idempotent.
- **Ranged reads** take a half-open range ``[start, end)`` in bytes. ``start`` defaults to 0 and
  ``end`` to the object's end. ``end`` past the end is clamped (as S3 does). ``start`` equal to
  the size gives ``b""`` (S3 itself answers 416 there; we make "read from where I stopped"
  loops simple); ``start`` beyond the size, a negative offset or ``start > end`` raise
  ``InvalidObjectRange``. A missing key raises ``ObjectNotFound`` even for an empty range.
- **Listing** returns keys in lexicographic order of their UTF-8 bytes (S3's order), those
  starting with ``prefix`` (a plain string prefix, not necessarily a whole segment) and greater
  than ``start_after``, at most ``limit`` of them; pages are fetched under the hood.
- **Delete** is idempotent: deleting a missing key succeeds.
- **ETags** are opaque: equal for an unchanged object, different after a rewrite (on S3 even a
  rewrite with the same bytes may keep its ETag; on the local backend it changes). They are not
  content hashes you can compute yourself (multipart ETags and the local backend's are not MD5).
- **Errors** are the classes of ``objstore.errors``; retry decisions use ``err.retryable`` and
  ``backoff_delays`` below: the store itself only retries inside botocore, a few times.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from os import PathLike
from types import TracebackType

from danube_common.objstore.errors import InvalidObjectKey, InvalidObjectRange

#: S3's limit on a key's length (UTF-8 bytes), the configured prefix included.
MAX_KEY_BYTES = 1024
#: Segments starting with this are the local backend's in-flight writes; keys may not use it.
TMP_SEGMENT_PREFIX = ".danube-tmp."

_KEY_HELP = (
    "keys are '/'-separated segments such as 'topics/ns/t/00000000000000000042.seg': no leading '/', "
    "no empty, '.' or '..' segment, no control character, at most 1024 bytes in UTF-8"
)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What the store knows about one object."""

    #: The key as the caller named it (without the configured prefix).
    key: str
    size: int
    #: Opaque version tag (no quotes); see the module docstring.
    etag: str
    #: When the object was last written (timezone-aware, UTC).
    last_modified: datetime


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def _utf8_problem(text: str) -> str | None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid Unicode (a lone surrogate)"
    return f"it is longer than {MAX_KEY_BYTES} bytes in UTF-8" if size > MAX_KEY_BYTES else None


def _key_problem(key: str) -> str | None:
    if (problem := _utf8_problem(key)) is not None:
        return problem
    if _has_control(key):
        return "it contains a control character"
    if key.startswith("/"):
        return "it starts with '/'"
    for seg in key.split("/"):
        if seg == "":
            return "it has an empty segment ('//' or a trailing '/')"
        if seg in (".", ".."):
            return f"it has a {seg!r} segment"
        if seg.startswith(TMP_SEGMENT_PREFIX):
            return f"a segment starts with {TMP_SEGMENT_PREFIX!r}, which is reserved for temporary files"
    return None


def validate_key(key: str) -> str:
    """Return ``key`` if it follows the key rules, else raise ``InvalidObjectKey`` saying why."""
    if not isinstance(key, str) or key == "":
        raise InvalidObjectKey(f"invalid object key {key!r}: it is empty; {_KEY_HELP}")
    problem = _key_problem(key)
    if problem is not None:
        raise InvalidObjectKey(f"invalid object key {key!r}: {problem}; {_KEY_HELP}")
    return key


def full_key(prefix: str, key: str) -> str:
    """``prefix + key`` after checking ``key`` and the combined length."""
    validate_key(key)
    full = prefix + key
    if len(full.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidObjectKey(
            f"invalid object key {key!r}: with the configured prefix {prefix!r} it is longer than "
            f"{MAX_KEY_BYTES} bytes in UTF-8; use a shorter key or prefix"
        )
    return full


def _prefix_problem(prefix: str) -> str | None:
    if (problem := _utf8_problem(prefix)) is not None:
        return problem
    if _has_control(prefix):
        return "it contains a control character"
    if prefix.startswith("/"):
        return "it starts with '/'"
    # Every segment but the last is whole and must be valid; the last may be partial.
    for seg in prefix.split("/")[:-1]:
        if seg == "":
            return "it has an empty segment ('//')"
        if seg in (".", ".."):
            return f"it has a {seg!r} segment"
        if seg.startswith(TMP_SEGMENT_PREFIX):
            return f"a segment starts with {TMP_SEGMENT_PREFIX!r}, which is reserved"
    return None


def validate_prefix(prefix: str) -> str:
    """Check a list prefix: "" or the start of a valid key (it may end in '/' or mid-segment)."""
    problem = _prefix_problem(prefix) if prefix else None
    if problem is not None:
        raise InvalidObjectKey(f"invalid list prefix {prefix!r}: {problem}; {_KEY_HELP}")
    return prefix


def check_range(key: str, start: int | None, end: int | None) -> tuple[int, int | None]:
    """Validate a ranged read's arguments before knowing the size: ``(start, end)`` with defaults."""
    lo = 0 if start is None else start
    if lo < 0 or (end is not None and end < 0):
        raise InvalidObjectRange(
            f"invalid range [{start}, {end}) for {key!r}: offsets must be >= 0 (the range is half-open, "
            "[start, end) in bytes; leave end unset to read to the end)"
        )
    if end is not None and end < lo:
        raise InvalidObjectRange(f"invalid range [{start}, {end}) for {key!r}: start must not exceed end")
    return lo, end


def clamp_range(key: str, start: int, end: int | None, size: int) -> tuple[int, int]:
    """Apply the range rules to an object of ``size`` bytes: the byte slice ``[lo, hi)`` to return."""
    if start > size:
        raise InvalidObjectRange(
            f"range start {start} is past the end of {key!r} ({size} bytes): start may be at most the size"
        )
    hi = size if end is None else min(end, size)
    return start, hi


def plan_parts(size: int, part_size: int, *, max_parts: int = 10_000) -> list[tuple[int, int]]:
    """Split ``size`` bytes into ``(offset, length)`` parts of ``part_size`` (the last may be shorter).

    If that needs more than ``max_parts`` parts, the part size grows (to a whole MiB) so it does not.
    """
    if size < 0 or part_size <= 0 or max_parts <= 0:
        raise ValueError(f"plan_parts: bad arguments size={size} part_size={part_size} max_parts={max_parts}")
    if size == 0:
        return [(0, 0)]
    if -(-size // part_size) > max_parts:
        mib = 1024 * 1024
        part_size = -(-size // max_parts)
        part_size = -(-part_size // mib) * mib
    return [(off, min(part_size, size - off)) for off in range(0, size, part_size)]


def backoff_delays(
    *,
    initial_s: float = 0.2,
    max_s: float = 30.0,
    multiplier: float = 2.0,
    jitter: float = 0.5,
    attempts: int | None = None,
    rand: Callable[[], float] = random.random,
) -> Iterator[float]:
    """Delays (seconds) to sleep between retries: exponential, capped, with jitter.

    The n-th delay is ``min(max_s, initial_s * multiplier**n)`` scaled down by a random factor in
    ``(1 - jitter, 1]`` so that many clients retrying at once spread out. Yields ``attempts``
    delays (forever if None). Pure apart from ``rand``: pass ``rand=lambda: 0.0`` for the nominal
    values. Typical use::

        for delay in backoff_delays(attempts=5):
            try:
                return await store.put_file(key, path, if_absent=True)
            except ObjectStoreError as err:
                if not err.retryable:
                    raise
            await asyncio.sleep(delay)
    """
    if initial_s < 0 or max_s < initial_s or multiplier < 1 or not 0 <= jitter <= 1:
        raise ValueError(
            "backoff_delays needs 0 <= initial_s <= max_s, multiplier >= 1 and 0 <= jitter <= 1, got "
            f"initial_s={initial_s} max_s={max_s} multiplier={multiplier} jitter={jitter}"
        )
    if attempts is not None and attempts < 0:
        raise ValueError(f"backoff_delays: attempts must be >= 0 or None, got {attempts}")
    nominal = initial_s
    n = 0
    while attempts is None or n < attempts:
        yield nominal * (1.0 - jitter * rand())
        nominal = min(max_s, nominal * multiplier)
        n += 1


class ObjectStore(abc.ABC):
    """An S3-like store of immutable-ish blobs under string keys (see the module docstring).

    Every method is a coroutine and never blocks the event loop. Use as ``async with`` or call
    :meth:`aclose` when done; a closed store must not be used again.
    """

    @abc.abstractmethod
    async def put(self, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        """Store ``data`` under ``key`` atomically (replacing any object unless ``if_absent``)."""

    @abc.abstractmethod
    async def put_file(self, key: str, path: str | PathLike[str], *, if_absent: bool = False) -> ObjectInfo:
        """Store the file at ``path`` under ``key``, streaming it (multipart on S3 when large)."""

    @abc.abstractmethod
    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes, or the half-open slice ``[start, end)`` of them."""

    @abc.abstractmethod
    async def head(self, key: str) -> ObjectInfo:
        """Size, ETag and last-modified time of an object; ``ObjectNotFound`` if there is none."""

    @abc.abstractmethod
    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[ObjectInfo]:
        """Objects whose key starts with ``prefix`` and sorts after ``start_after``, in key order."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove an object; succeeds if there is none."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections and files; idempotent."""

    async def __aenter__(self) -> ObjectStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"list limit must be >= 0 or None, got {limit}")
