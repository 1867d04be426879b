"""Payload compression: bytes on the wire and in the WAL, msg/s publish and end to end, for
compressible 1 KB JSON payloads with none, lz4 and zstd, each per message and per batch (packs),
in one run.

    .venv/bin/python bench/compression.py [--messages 30000] [--rounds 3]

Part 1, in this process (no broker): the compression ratio of the payloads compressed one by
one (``pack_batches=False``) next to the ratio the same codec reaches on packs of 100 and 1000
messages (the SDK's pack format, what ``pack_batches=True`` stores), and the CPU cost per
message of compressing and decompressing one by one. The row
``zstd+dict`` (not implemented in the SDK, measured only to size the gap) is per-message zstd
with a 16 KB dictionary trained on the first 1000 payloads.

Part 2, one local cluster (etcd + lookup + 1 broker; reliable topics with durability fsync, WAL on
this machine's disk): for each variant (none; lz4 and zstd per message and per batch) one SDK producer publishes ``--messages`` distinct payloads
as fast as it can (pipelined, batched) to a fresh topic: publish msg/s. Then, on another fresh
topic, an exclusive consumer in the same process receives (reading every payload, so it
decompresses) and acks while the producer publishes: end-to-end msg/s = messages / (last
received - first sent). Bytes on the wire are the payload bytes the consumer received as they
travelled (a pack counted once; the same bytes the producer sent and the broker stored);
WAL bytes are the topic's segment files on disk after the publish run (they include the
per-record framing, which packs also save). Variants run in a rotated order each round; the
table shows each figure's median over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import zstandard

from danube_common.compression import Compression, compress, decompress
from danube_common.grpc_util import strip_scheme
from danube_common.packing import pack
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeApi_pb2 as pb

CODECS = (Compression.NONE, Compression.LZ4, Compression.ZSTD)
#: (name, codec, pack_batches) of part 2.
VARIANTS = (
    ("none", Compression.NONE, False),
    ("lz4/msg", Compression.LZ4, False),
    ("lz4/batch", Compression.LZ4, True),
    ("zstd/msg", Compression.ZSTD, False),
    ("zstd/batch", Compression.ZSTD, True),
)
PAYLOAD_BYTES = 1024
#: The free-text field is made of these words (customer notes), so it compresses like text.
_NOTE_TEXT = (
    "please deliver to the back door leave with neighbour call before arrival gift wrap "
    "fragile handle with care no invoice in the parcel office hours only weekend delivery "
    "ring twice order for the team event replacement for damaged item express if possible"
)
WORDS = tuple(_NOTE_TEXT.split(" "))


def order_json(rng: random.Random, i: int) -> bytes:
    """One order event as JSON, padded to exactly 1 KB with a free-text note: the field names
    repeat across messages and within one (line items), the values vary (ids, amounts,
    timestamps, the note's words)."""
    doc = {
        "event": "order_created",
        "order_id": f"ord-{i:09d}",
        "customer": {
            "id": f"cus-{rng.randrange(10**6):06d}",
            "tier": rng.choice(["gold", "silver", "basic"]),
        },
        "created_at": f"2026-11-27T10:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z",
        "currency": "EUR",
        "items": [
            {
                "sku": f"SKU-{rng.randrange(10**5):05d}",
                "quantity": rng.randrange(1, 5),
                "unit_price": round(rng.uniform(1, 200), 2),
                "warehouse": rng.choice(["ams-1", "fra-2", "par-1"]),
            }
            for _ in range(5)
        ],
        "shipping": {
            "method": rng.choice(["standard", "express"]),
            "country": rng.choice(["NL", "DE", "FR"]),
        },
        "note": "",
    }
    raw = json.dumps(doc, separators=(", ", ": ")).encode()
    if len(raw) > PAYLOAD_BYTES:
        doc["items"] = doc["items"][:3]  # type: ignore[index]
        raw = json.dumps(doc, separators=(", ", ": ")).encode()
    pad = PAYLOAD_BYTES - len(raw)
    note = ""
    while len(note) < pad:
        note += rng.choice(WORDS) + " "
    doc["note"] = note[:pad]
    out = json.dumps(doc, separators=(", ", ": ")).encode()
    assert len(out) == PAYLOAD_BYTES, len(out)
    return out


def payloads(n: int, seed: int = 18) -> list[bytes]:
    rng = random.Random(seed)
    return [order_json(rng, i) for i in range(n)]


# ---------------------------------------------------------------------- part 1: offline


def offline(docs: list[bytes]) -> list[dict[str, float | str]]:
    raw = sum(len(d) for d in docs)
    rows: list[dict[str, float | str]] = []
    for codec in CODECS[1:]:
        t0 = time.perf_counter()
        packed = [compress(codec, d) for d in docs]
        t1 = time.perf_counter()
        for p in packed:
            decompress(codec, p)
        t2 = time.perf_counter()
        row: dict[str, float | str] = {
            "codec": codec.name.lower(),
            "per_message": raw / sum(len(p) for p in packed),
            "compress_us": (t1 - t0) / len(docs) * 1e6,
            "decompress_us": (t2 - t1) / len(docs) * 1e6,
        }
        msgs = [pb.StreamMessage(payload=d) for d in docs]
        for size in (100, 1000):
            packs = [pack(msgs[i : i + size]) for i in range(0, len(msgs), size)]
            row[f"batch_{size}"] = raw / sum(len(compress(codec, b)) for b in packs)
        rows.append(row)
    # Not implemented, measured only to size the gap: per-message zstd with a dictionary trained
    # on the first 1000 payloads (what a per-topic dictionary could recover without batches).
    trained = zstandard.train_dictionary(16 * 1024, docs[:1000])
    cctx = zstandard.ZstdCompressor(level=3, dict_data=trained)
    rest = docs[1000:] or docs
    rows.append(
        {
            "codec": "zstd+dict",
            "per_message": sum(len(d) for d in rest) / sum(len(cctx.compress(d)) for d in rest),
            "batch_100": float("nan"),
            "batch_1000": float("nan"),
            "compress_us": float("nan"),
            "decompress_us": float("nan"),
        }
    )
    return rows


# ---------------------------------------------------------------------- part 2: a live broker


def create_topic(admin_url: str, name: str) -> None:
    with grpc.insecure_channel(strip_scheme(admin_url)) as ch:
        apb_grpc.TopicAdminStub(ch).CreateTopic(
            apb.CreateTopicRequest(name=name, dispatch_strategy="reliable", durability="fsync"), timeout=10
        )


def wal_bytes(data_root: Path, topic: str) -> int:
    rel = topic.strip("/")
    return sum(
        f.stat().st_size for d in data_root.glob(f"broker-*/{rel}") for f in d.rglob("*") if f.is_file()
    )


async def publish_only(
    service_url: str, topic: str, codec: Compression, packs: bool, docs: list[bytes]
) -> float:
    from danube_sdk import DanubeClient, DispatchStrategy

    async with DanubeClient(service_url) as client:
        producer = await client.create_producer(
            topic, dispatch_strategy=DispatchStrategy.RELIABLE, compression=codec, pack_batches=packs
        )
        await producer.send(docs[0])
        t0 = time.perf_counter()
        futs = [await producer.send_async(d) for d in docs]
        await asyncio.gather(*futs)
        elapsed = time.perf_counter() - t0
        await producer.close()
    return len(docs) / elapsed


async def end_to_end(
    service_url: str, topic: str, codec: Compression, packs: bool, docs: list[bytes]
) -> tuple[float, int]:
    """(msg/s from first send to last receive, payload bytes received as they travelled)."""
    from danube_sdk import DanubeClient, DispatchStrategy, SubType

    async with DanubeClient(service_url) as client:
        producer = await client.create_producer(
            topic, dispatch_strategy=DispatchStrategy.RELIABLE, compression=codec, pack_batches=packs
        )
        await producer.send(b"{}")
        consumer = await client.subscribe(topic, subscription="bench", sub_type=SubType.EXCLUSIVE)
        wire = 0

        async def consume() -> float:
            nonlocal wire
            got = 0
            while got < len(docs):
                for m in await consumer.receive_many(1000, timeout_s=60):
                    assert len(m.payload) == PAYLOAD_BYTES  # decompresses
                    if not m.batch_index:  # a pack once, with its first message
                        wire += len(m.raw.payload)
                    await consumer.ack(m)
                    got += 1
            return time.perf_counter()

        reader = asyncio.create_task(consume())
        t0 = time.perf_counter()
        futs = [await producer.send_async(d) for d in docs]
        await asyncio.gather(*futs)
        done = await reader
        await consumer.close()
        await producer.close()
    return len(docs) / (done - t0), wire


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=30_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    docs = payloads(args.messages)
    raw_bytes = len(docs) * PAYLOAD_BYTES

    print(
        f"== part 1: {len(docs):,} JSON payloads of {PAYLOAD_BYTES} B, compressed in this process", flush=True
    )
    print(
        f"{'codec':<9} {'ratio/msg':>9} {'ratio/100':>9} {'ratio/1000':>10} {'compress us':>11} {'decompress us':>13}"
    )
    for r in offline(docs):
        print(
            f"{r['codec']:<9} {r['per_message']:>9.2f} {r['batch_100']:>9.2f} {r['batch_1000']:>10.2f} "
            f"{r['compress_us']:>11.1f} {r['decompress_us']:>13.1f}"
        )

    from danube_local.cluster import LocalCluster

    results: dict[str, dict[str, list[float]]] = {
        v[0]: {"pub": [], "e2e": [], "wire": [], "wal": []} for v in VARIANTS
    }
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(brokers=1, workdir=Path(tmp), log_level="WARNING") as c,
    ):
        for rnd in range(args.rounds):
            k = rnd % len(VARIANTS)
            for name, codec, packs in VARIANTS[k:] + VARIANTS[:k]:
                print(f"== part 2, round {rnd + 1}: {name} ...", flush=True)
                slug = name.replace("/", "-")
                topic = f"/default/bench-compression-{slug}-pub-{rnd}"
                create_topic(c.admin_url, topic)
                rate = asyncio.run(publish_only(c.service_url, topic, codec, packs, docs))
                results[name]["pub"].append(rate)
                results[name]["wal"].append(wal_bytes(Path(tmp) / "data", topic))
                topic = f"/default/bench-compression-{slug}-e2e-{rnd}"
                create_topic(c.admin_url, topic)
                rate, wire = asyncio.run(end_to_end(c.service_url, topic, codec, packs, docs))
                results[name]["e2e"].append(rate)
                results[name]["wire"].append(wire)

    med = {c: {k: statistics.median(v) for k, v in r.items()} for c, r in results.items()}
    base = med["none"]
    print()
    print(
        f"part 2: reliable topic (fsync), {len(docs):,} x {PAYLOAD_BYTES} B, median of {args.rounds} rounds"
    )
    print(
        f"{'variant':<10} {'wire MB':>8} {'wire x':>7} {'WAL MB':>8} {'WAL x':>6} "
        f"{'publish msg/s':>13} {'vs none':>7} {'e2e msg/s':>10} {'vs none':>7}"
    )
    for name, _, _ in VARIANTS:
        m = med[name]
        print(
            f"{name:<10} {m['wire'] / 1e6:>8.2f} {raw_bytes / m['wire']:>7.2f} "
            f"{m['wal'] / 1e6:>8.2f} {base['wal'] / m['wal']:>6.2f} "
            f"{m['pub']:>13,.0f} {m['pub'] / base['pub']:>7.2f} {m['e2e']:>10,.0f} {m['e2e'] / base['e2e']:>7.2f}"
        )
    print("(wire x: raw payload bytes / bytes sent; WAL x: WAL bytes of none / WAL bytes of the codec)")
    print("each round (msg/s, publish | end to end):")
    for name, _, _ in VARIANTS:
        r = results[name]
        pub = ", ".join(f"{v:,.0f}" for v in r["pub"])
        e2e = ", ".join(f"{v:,.0f}" for v in r["e2e"])
        print(f"  {name:<10} {pub} | {e2e}")


if __name__ == "__main__":
    main()
