"""danube-cli produce --compression / --no-chunking, and consume of compressed and chunked
messages, against the fake broker (max message size 4096)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from danube_common.errors import MessageTooLarge
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.cli.produce_consume import build_parser, explain, run_consume, run_produce
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/cli-packed"


def test_compression_flag_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser({})
    assert parser.parse_args(["produce", "-m", "x"]).compression == "none"
    args = parser.parse_args(["produce", "-m", "x", "--compression", "zstd", "--no-chunking"])
    assert (args.compression, args.no_chunking) == ("zstd", True)
    with pytest.raises(SystemExit):
        parser.parse_args(["produce", "-m", "x", "--compression", "gzip"])
    assert "invalid choice: 'gzip'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["produce", "--help"])
    text = capsys.readouterr().out
    assert "--compression {none,lz4,zstd}" in text and "--no-chunking" in text


async def test_produce_compressed_and_chunked_then_consume_whole(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.create_topic(T)
    doc = json.dumps([{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(1500)]).encode()
    path = tmp_path / "doc.json"
    path.write_bytes(doc)
    out = io.StringIO()
    consume = build_parser({}).parse_args(
        [
            "consume",
            "-s",
            cluster.service_url,
            "-t",
            T,
            "-m",
            "s",
            "-c",
            "1",
            "--output",
            "json",
            "--sub-type",
            "exclusive",
        ]
    )
    task = asyncio.create_task(run_consume(consume, out=out, err=io.StringIO(), stop=asyncio.Event()))
    await wait_until(lambda: "s" in cluster.topics[T].subs, timeout_s=5, what="subscribed")
    produce = build_parser({}).parse_args(
        ["produce", "-s", cluster.service_url, "-t", T, "-f", str(path), "--compression", "lz4"]
    )
    assert await run_produce(produce, out=io.StringIO(), err=io.StringIO(), stop=asyncio.Event()) == 0
    log = cluster.topics[T].log
    assert len(log) > 1 and {m.compression for m in log} == {pb.PAYLOAD_COMPRESSION_LZ4}
    assert sum(len(m.payload) for m in log) < len(doc) // 2  # compressed, then chunked
    assert await task == 0
    (line,) = out.getvalue().splitlines()
    got = json.loads(line)
    assert got["payload"] == doc.decode() and got["chunk_offsets"] == list(range(len(log)))


async def test_no_chunking_refuses_an_oversized_payload_with_a_hint(cluster: FakeCluster) -> None:
    args = build_parser({}).parse_args(
        ["produce", "-s", cluster.service_url, "-t", T, "--size", "5000", "--no-chunking"]
    )
    with pytest.raises(MessageTooLarge) as err:
        await run_produce(args, out=io.StringIO(), err=io.StringIO(), stop=asyncio.Event())
    assert "--no-chunking" in explain(err.value, cluster.service_url)
