"""Payload codecs: round trips, the wire values, refusals of unknown codecs, corrupt frames and
frames that would decompress past the limit."""

from __future__ import annotations

import json

import lz4.frame
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from danube_common.compression import (
    Compression,
    compress,
    compress_if_smaller,
    decompress,
)
from danube_common.errors import CorruptData, InvalidArgument, UnsupportedCompression
from danube_common.pb import DanubeApi_pb2 as pb

pytestmark = pytest.mark.unit

JSON_1KB = json.dumps(
    [{"id": i, "customer": f"customer-{i}", "status": "active"} for i in range(40)]
).encode()[:1024]


def test_codec_values_are_the_wire_values() -> None:
    assert Compression.NONE == pb.PAYLOAD_COMPRESSION_NONE
    assert Compression.LZ4 == pb.PAYLOAD_COMPRESSION_LZ4
    assert Compression.ZSTD == pb.PAYLOAD_COMPRESSION_ZSTD
    assert [c.name.lower() for c in Compression] == ["none", "lz4", "zstd"]


@pytest.mark.parametrize(
    ("given_", "expected"),
    [
        ("zstd", Compression.ZSTD),
        (" LZ4 ", Compression.LZ4),
        ("none", Compression.NONE),
        (2, Compression.ZSTD),
    ],
)
def test_parse(given_: str | int, expected: Compression) -> None:
    assert Compression.parse(given_) is expected


@pytest.mark.parametrize("bad", ["gzip", "", 9])
def test_parse_refuses_unknown_names_and_says_what_is_allowed(bad: str | int) -> None:
    with pytest.raises(InvalidArgument, match="none, lz4, zstd"):
        Compression.parse(bad)


@given(st.binary(max_size=4096), st.sampled_from(list(Compression)))
def test_round_trip(data: bytes, codec: Compression) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_compressible_json_gets_smaller_and_random_bytes_stay_plain() -> None:
    for codec in (Compression.LZ4, Compression.ZSTD):
        used, out = compress_if_smaller(codec, JSON_1KB)
        assert used is codec and len(out) < len(JSON_1KB) // 2
        assert compress_if_smaller(codec, b"ab") == (Compression.NONE, b"ab")  # frame overhead
    assert compress_if_smaller(Compression.NONE, JSON_1KB) == (Compression.NONE, JSON_1KB)


def test_unknown_codec_is_a_clear_error_not_garbage() -> None:
    with pytest.raises(UnsupportedCompression, match="codec 7, which this client does not know"):
        decompress(7, b"whatever")


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_corrupt_or_truncated_frames_are_corrupt_data(codec: Compression) -> None:
    good = compress(codec, JSON_1KB)
    with pytest.raises(CorruptData):
        decompress(codec, b"not a frame at all")
    with pytest.raises(CorruptData):
        decompress(codec, good[: len(good) // 2])


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_a_frame_that_would_pass_the_limit_is_refused_before_decompressing(codec: Compression) -> None:
    bomb = compress(codec, b"\0" * 1_000_000)
    with pytest.raises(CorruptData, match="over the limit of 1000"):
        decompress(codec, bomb, max_bytes=1000)
    assert len(decompress(codec, bomb, max_bytes=1_000_000)) == 1_000_000


def test_frames_without_a_recorded_size_are_still_bounded() -> None:
    lz4_bomb = lz4.frame.compress(b"\0" * 100_000, store_size=False)
    zstd_bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * 100_000)
    for codec, data in ((Compression.LZ4, lz4_bomb), (Compression.ZSTD, zstd_bomb)):
        with pytest.raises(CorruptData):
            decompress(codec, data, max_bytes=1000)
        assert decompress(codec, data) == b"\0" * 100_000
