"""The streaming source's rows: messages of a pack (compression per batch) become rows of their
own that share the pack's offset and carry their ``batch_index``."""

from __future__ import annotations

from typing import Any

import pytest

from danube_common.compression import Compression
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.packs import compress_batch, unpack_into
from danube_sdk.types import Message
from danube_spark.source import arrow_schema, record_batch

pytestmark = pytest.mark.unit

TOPIC = "/default/orders-part-1"


def test_rows_of_packed_and_plain_messages() -> None:
    frame = pb.PublishBatch()
    for i in range(3):
        m = frame.messages.add(
            payload=f'{{"order": {i}, "note": "{"x" * 40}"}}'.encode(), publish_time=1000 + i
        )
        m.attributes["i"] = str(i)
    compress_batch(frame.messages, Compression.ZSTD, pack_runs=True, max_pack_bytes=1 << 20)
    (packed,) = frame.messages
    packed.msg_id.topic_offset = 7
    msgs: list[Message[Any]] = []
    unpack_into(msgs, packed, TOPIC, None, None)
    msgs.append(
        Message(pb.StreamMessage(payload=b"plain", publish_time=2000, msg_id=pb.MsgID(topic_offset=8)), TOPIC)
    )
    rows = record_batch(msgs, "/default/orders", 1, arrow_schema()).to_pydict()
    assert rows["offset"] == [7, 7, 7, 8]
    assert rows["batch_index"] == [0, 1, 2, None]
    assert rows["payload"][3] == b"plain" and rows["payload"][1].startswith(b'{"order": 1')
    assert rows["attributes"][2] == [("i", "2")]
    assert [t.timestamp() for t in rows["publish_time"]] == [1.0, 1.001, 1.002, 2.0]
