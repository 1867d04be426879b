"""The executor's half of a history read: fetch a task's objects, check and decode their frames,
and turn the stored messages into Arrow record batches of :data:`SCHEMA`.

Each object is fetched whole (one GET) through the project's object store code, then decoded
with :func:`~danube_common.segment_objects.decode_object`: a damaged object fails the task with
CorruptData naming it (Spark retries a task a few times, then fails the query with that message).
Only offsets of the task's pieces and publish times in the asked range become rows.

Payloads compressed by the producer (lz4/zstd) are decompressed unless ``decompress`` is off.
A pack (many messages compressed together, ``danube_common.packing``) becomes one row per
message, each with the pack's offset and its own ``batch_index`` (with ``decompress`` off: one
row, the pack as stored, ``batch_size`` saying how many messages it holds).
A chunk of a large message (``chunk`` column set) is one row as stored: chunks are joined by
their ``chunk.message_uuid`` and ``chunk.index`` in a query, if needed (its payload is a slice of
the whole, possibly compressed, payload, so it is never decompressed alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from danube_common.compression import Compression, decompress
from danube_common.errors import CorruptData, DataLoss, UnsupportedCompression
from danube_common.objstore import ObjectNotFound, ObjectStore, open_object_store
from danube_common.packing import unpack
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.segment_objects import DAMAGE_ADVICE, Piece, decode_object
from danube_spark.decoding import DecodeSpec, PayloadDecoder
from danube_spark.history_options import HistoryOptions
from danube_spark.history_plan import ReadTask


def _field(name: str, t: DataType, nullable: bool = True) -> StructField:
    return StructField(name, t, nullable)


#: The columns of a message row, shared by ``danube-history`` and the streaming source.
MESSAGE_FIELDS: list[StructField] = [
    _field("topic", StringType(), False),
    _field("partition", IntegerType()),
    _field("offset", LongType(), False),
    _field("publish_time", TimestampType(), False),
    _field("key", StringType()),
    _field("attributes", MapType(StringType(), StringType(), False), False),
    _field("payload", BinaryType(), False),
    _field("producer_name", StringType()),
    _field("schema_id", LongType()),
    _field("schema_version", IntegerType()),
    _field("sequence_id", LongType()),
    _field("batch_index", IntegerType()),
]


def _schema() -> StructType:
    chunk = StructType(
        [
            _field("message_uuid", StringType()),
            _field("index", IntegerType()),
            _field("count", IntegerType()),
            _field("total_size", LongType()),
        ]
    )
    return StructType(
        [
            *MESSAGE_FIELDS,
            _field("compression", StringType()),
            _field("chunk", chunk),
            _field("batch_size", IntegerType()),
        ]
    )


SCHEMA = _schema()
_COLUMNS = len(SCHEMA.fields)
#: Rows per record batch handed to Spark.
BATCH_ROWS = 8192

_CODEC_NAMES = {c.value: c.name.lower() for c in Compression}


class RowBuilder:
    """Columns of the rows being built (plain lists, one per field of :data:`SCHEMA`)."""

    def __init__(self, task: ReadTask, opts: HistoryOptions, decode: DecodeSpec | None = None) -> None:
        self.topic = task.topic
        self.partition = task.partition
        self.opts = opts
        self.cols: list[list[Any]] = [[] for _ in range(_COLUMNS)]
        #: decode=true: the value and decode_error columns, after those above.
        self.decoder = PayloadDecoder(decode) if decode is not None else None

    def __len__(self) -> int:
        return len(self.cols[0])

    def add_object(self, piece: Piece, data: bytes) -> int:
        """Rows for the piece's offsets (and the asked publish times); returns how many."""
        n = 0
        keeps_time = self.opts.keeps_time
        lo, hi = piece.lo, piece.hi
        for f in decode_object(data, piece.obj):
            if lo <= f.offset < hi and keeps_time(f.publish_time_ms):
                try:
                    n += self.add(f.offset, f.publish_time_ms, f.record)
                except (CorruptData, UnsupportedCompression) as exc:  # the payload, not the frame
                    raise type(exc)(
                        f"object {piece.obj.key} of topic {piece.obj.topic}, offset {f.offset}: {exc.message} "
                        "(read with decompress=false to get the payload as stored)"
                    ) from exc
                except DecodeError as exc:
                    raise CorruptData(
                        f"object {piece.obj.key} of topic {piece.obj.topic}, offset {f.offset}: the record "
                        f"is not a message ({exc}) although its crc32c matches; {DAMAGE_ADVICE}"
                    ) from exc
        return n

    def add(self, offset: int, publish_time_ms: int, record: bytes) -> int:
        """Rows of one stored record: one, or each message of a pack (decompress on); returns
        how many."""
        m = pb.StreamMessage.FromString(record)
        if m.batch_size and self.opts.decompress:
            entries = unpack(m)
            for i, e in enumerate(entries):
                self._row(m, offset, e.publish_time or publish_time_ms, e.payload, e.attributes, i)
            return len(entries)
        payload = m.payload
        if m.compression and self.opts.decompress and not m.HasField("chunk"):
            payload = decompress(m.compression, payload)
        self._row(m, offset, publish_time_ms, payload, m.attributes, None)
        return 1

    def _row(
        self,
        m: pb.StreamMessage,
        offset: int,
        publish_time_ms: int,
        payload: bytes,
        attrs: Any,
        batch_index: int | None,
    ) -> None:
        chunked = m.HasField("chunk")
        c = self.cols
        c[0].append(self.topic)
        c[1].append(self.partition)
        c[2].append(offset)
        c[3].append(publish_time_ms)  # epoch ms: made a timestamp column in take()
        c[4].append(m.routing_key if m.HasField("routing_key") else None)
        c[5].append([(k, attrs[k]) for k in attrs])  # the fastest way through a protobuf map
        c[6].append(payload)
        c[7].append(m.producer_name or None)
        c[8].append(m.schema_id if m.HasField("schema_id") else None)
        c[9].append(m.schema_version if m.HasField("schema_version") else None)
        c[10].append(m.sequence_id or None)
        c[11].append(batch_index)
        c[12].append(_CODEC_NAMES.get(m.compression, str(m.compression)))
        c[13].append(
            {
                "message_uuid": m.chunk.message_uuid,
                "index": m.chunk.index,
                "count": m.chunk.count,
                "total_size": m.chunk.total_size,
            }
            if chunked
            else None
        )
        c[14].append(m.batch_size or None)
        if self.decoder is not None:
            sid = m.schema_id if m.HasField("schema_id") else None
            sver = m.schema_version if m.HasField("schema_version") else None
            if chunked:
                self.decoder.add_undecodable("a chunk of a large message is not decoded alone")
            elif m.compression and not self.opts.decompress:
                self.decoder.add_undecodable(
                    "the payload is compressed (read with decompress=true to decode)"
                )
            else:
                self.decoder.add(payload, sid, sver)

    def take(self, arrow_schema: Any) -> Any:
        """The rows built so far as one ``pyarrow.RecordBatch`` (and start afresh)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ms = pa.array(self.cols[3], type=pa.int64())
        self.cols[3] = []
        fields = list(arrow_schema)
        base = fields[: len(self.cols)]  # then decode's columns, if any
        arrays = [pa.array(col, type=f.type) for col, f in zip(self.cols, base, strict=True)]
        arrays[3] = pc.multiply(ms, 1000).cast(arrow_schema.field(3).type)
        if self.decoder is not None:
            arrays += self.decoder.take(*fields[len(self.cols) :])
        self.cols = [[] for _ in range(_COLUMNS)]
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def arrow_schema(decode: DecodeSpec | None = None) -> Any:
    """:data:`SCHEMA` (with ``decode``'s columns at the end) as the Arrow schema Spark expects of
    a Python data source's batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = SCHEMA if decode is None else StructType([*SCHEMA.fields, *decode.fields()])
    return to_arrow_schema(schema, timezone="UTC")


def read_task(task: ReadTask, opts: HistoryOptions, decode: DecodeSpec | None = None) -> Iterator[Any]:
    """Record batches of the task's rows, in offset order (blocking: runs its own event loop)."""
    schema = arrow_schema(decode)
    loop = asyncio.new_event_loop()
    store: ObjectStore | None = None
    try:
        store = loop.run_until_complete(open_object_store(opts.object_store))
        rows = RowBuilder(task, opts, decode)
        for piece in task.pieces:
            try:
                data = loop.run_until_complete(store.get(piece.obj.key))
            except ObjectNotFound as exc:
                raise DataLoss(
                    f"topic {piece.obj.topic}: object {piece.obj.key} (offsets {piece.obj.start_offset}.."
                    f"{piece.obj.next_offset - 1}) is gone from object storage: the topic's retention "
                    "deleted it after this query listed the history. Run the query again (the history "
                    "starts later now), or read from a later start_offset or start_time"
                ) from exc
            rows.add_object(piece, data)
            if len(rows) >= BATCH_ROWS:
                yield rows.take(schema)
        if len(rows):
            yield rows.take(schema)
    finally:
        if store is not None:
            loop.run_until_complete(store.aclose())
        loop.close()
