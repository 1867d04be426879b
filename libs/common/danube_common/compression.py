"""Payload codecs (pure): producers compress, consumers decompress, the broker only stores.

The codec travels with each record (``StreamMessage.compression``, wire values of
``PayloadCompression``): one message's payload, or a pack of many messages compressed together
(:mod:`danube_common.packing`).

Both codecs use their self-describing *frame* formats (the decompressed size is in the frame
header), so a consumer can refuse a payload that would decompress past its limit before
allocating anything.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterator

import lz4.frame
import zstandard

from danube_common.errors import CorruptData, InvalidArgument, UnsupportedCompression

#: Zstandard level used by producers (3 is zstd's own default: fast, good ratio).
ZSTD_LEVEL = 3
#: A payload is never decompressed past this (a corrupt or hostile frame header could ask for
#: any size); the gRPC frame limit bounds what a message can carry in the first place.
MAX_DECOMPRESSED_BYTES = 512 * 1024 * 1024
#: Frames that do not record their decompressed size are decompressed this much at a time.
_STEP_BYTES = 1024 * 1024


class Compression(enum.IntEnum):
    """Payload codec; the values are the wire values of ``PayloadCompression``."""

    NONE = 0
    LZ4 = 1
    ZSTD = 2

    @classmethod
    def parse(cls, name: str | int | Compression) -> Compression:
        """A codec from its name (``"none"``, ``"lz4"``, ``"zstd"``, any case) or wire value."""
        if isinstance(name, int):
            try:
                return cls(name)
            except ValueError:
                raise InvalidArgument(f"unknown compression {name}: use one of {names()}") from None
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise InvalidArgument(f"unknown compression {name!r}: use one of {names()}") from None


def names() -> str:
    return ", ".join(c.name.lower() for c in Compression)


class _Contexts(threading.local):
    """Zstandard contexts are reusable but not thread-safe: one pair per thread."""

    def __init__(self) -> None:
        self.cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self.dctx = zstandard.ZstdDecompressor()


_ctx = _Contexts()


def compress(codec: Compression, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` (a frame that records the original size)."""
    if codec == Compression.ZSTD:
        return _ctx.cctx.compress(data)
    if codec == Compression.LZ4:
        return lz4.frame.compress(data, store_size=True)
    return data


def compress_if_smaller(codec: Compression, data: bytes) -> tuple[Compression, bytes]:
    """Compress unless it does not pay: returns ``(NONE, data)`` when the compressed form is
    not smaller (tiny or random payloads), so nobody decompresses for nothing."""
    if codec == Compression.NONE:
        return codec, data
    out = compress(codec, data)
    if len(out) >= len(data):
        return Compression.NONE, data
    return codec, out


def decompress(codec: int, data: bytes, *, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The original payload. Raises UnsupportedCompression for a codec this process does not
    know, CorruptData for bytes that are not a valid frame or would exceed ``max_bytes``."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.ZSTD:
        size = _zstd_size(data)
        if size > max_bytes:
            raise CorruptData(f"zstd payload would decompress to {size} bytes, over the limit of {max_bytes}")
        try:
            if size >= 0:
                return _ctx.dctx.decompress(data)  # allocates the size the header records
            with _ctx.dctx.stream_reader(data) as reader:
                return _bounded(iter(lambda: reader.read(_STEP_BYTES), b""), max_bytes, "zstd")
        except zstandard.ZstdError as exc:
            raise CorruptData(f"zstd payload does not decompress: {exc}") from exc
    if codec == Compression.LZ4:
        return _lz4_decompress(data, max_bytes)
    raise UnsupportedCompression(
        f"the message's payload is compressed with codec {codec}, which this client does not know "
        f"(it knows {names()}): upgrade the consumer, or have the producer use one of those"
    )


def _zstd_size(data: bytes) -> int:
    """The decompressed size the frame header records (-1: not recorded)."""
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise CorruptData(f"zstd payload has no valid frame header: {exc}") from exc
    return int(size)


def _lz4_decompress(data: bytes, max_bytes: int) -> bytes:
    try:
        size = int(lz4.frame.get_frame_info(data).get("content_size") or 0)
        if size > max_bytes:
            raise CorruptData(f"lz4 payload would decompress to {size} bytes, over the limit of {max_bytes}")
        if size:
            out = lz4.frame.decompress(data)  # allocates the size the header records
            if len(out) != size:
                raise CorruptData(f"lz4 payload decompressed to {len(out)} bytes, its header says {size}")
            return bytes(out)
        d = lz4.frame.LZ4FrameDecompressor()

        def steps() -> Iterator[bytes]:
            yield d.decompress(data, max_length=_STEP_BYTES)
            while not d.eof and not d.needs_input:
                yield d.decompress(b"", max_length=_STEP_BYTES)

        out = _bounded(steps(), max_bytes, "lz4")
    except RuntimeError as exc:  # what the lz4 bindings raise for bad frames
        raise CorruptData(f"lz4 payload does not decompress: {exc}") from exc
    if not d.eof:
        raise CorruptData("lz4 payload is truncated")
    return out


def _bounded(pieces: Iterator[bytes], max_bytes: int, codec: str) -> bytes:
    """Join decompressed pieces, refusing to go past ``max_bytes`` (frames that do not record
    their size are decompressed step by step, never into one buffer of the limit's size)."""
    out = bytearray()
    for piece in pieces:
        out += piece
        if len(out) > max_bytes:
            raise CorruptData(f"{codec} payload decompresses past the limit of {max_bytes} bytes")
    return bytes(out)
