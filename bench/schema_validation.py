"""What payload validation costs on the publish path: msg/s with and without, in one run.

    .venv/bin/python bench/schema_validation.py [--messages 30000]

One local cluster (etcd + lookup + 1 broker). For 1 KB JSON documents (20 string fields) and
1 KB Avro records (the same 20 fields, raw binary), one SDK producer publishes as fast as it can
(pipelined, batched) to a non-reliable topic that has no schema, then to one whose schema
policy is ``enforce`` with payload validation (every message decoded and checked by the broker
before it is dispatched). Non-reliable topics keep the disk out of the measurement, so the ratio
is the validation's own cost. The producer attaches before the policy is set, so it sends no
schema reference: the broker validates each message against the subject's latest version,
exactly the work it does for a producer that names the schema.

Also printed: the validators alone (``danube_common.schema.validate_batch``, in this process),
as an upper bound of what the broker could validate per second on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import fastavro
import grpc
from reliable_publish import publish  # this directory: the same producer loop

from danube_common.grpc_util import strip_scheme
from danube_common.pb import SchemaRegistry_pb2 as spb
from danube_common.pb import SchemaRegistry_pb2_grpc as spb_grpc
from danube_common.schema import compile_schema, validate_batch

FIELDS = [f"field_{i:02d}" for i in range(20)]
JSON_SCHEMA = {
    "type": "object",
    "properties": {f: {"type": "string", "maxLength": 64} for f in FIELDS},
    "required": FIELDS,
}
AVRO_SCHEMA = {"type": "record", "name": "Doc", "fields": [{"name": f, "type": "string"} for f in FIELDS]}


def documents() -> dict[str, tuple[dict[str, object], bytes]]:
    """schema type -> (definition, one ~1 KB payload)."""
    record = {f: f"{f}-" + "v" * 36 for f in FIELDS}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_SCHEMA), record)
    return {
        "json_schema": (JSON_SCHEMA, json.dumps(record).encode()),
        "avro": (AVRO_SCHEMA, out.getvalue()),
    }


def validators_alone(seconds: float = 2.0) -> dict[str, float]:
    rates = {}
    for kind, (definition, payload) in documents().items():
        schema = compile_schema(kind, json.dumps(definition).encode())
        batch = [payload] * 500
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            assert not validate_batch(schema, batch)
            n += len(batch)
        rates[kind] = n / (time.perf_counter() - t0)
    return rates


def configure(service_url: str, topic: str, subject: str, kind: str, definition: dict[str, object]) -> None:
    with grpc.insecure_channel(strip_scheme(service_url)) as ch:
        stub = spb_grpc.SchemaRegistryStub(ch)
        stub.RegisterSchema(
            spb.RegisterSchemaRequest(
                subject=subject, schema_type=kind, schema_definition=json.dumps(definition).encode()
            ),
            timeout=10,
        )
        stub.ConfigureTopicSchema(
            spb.ConfigureTopicSchemaRequest(
                topic_name=topic,
                schema_subject=subject,
                validation_policy="enforce",
                enable_payload_validation=True,
            ),
            timeout=10,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=30_000)
    args = p.parse_args()

    from danube_local.cluster import LocalCluster

    alone = validators_alone()
    rows: list[tuple[str, str, int, dict[str, float]]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(brokers=1, workdir=Path(tmp), log_level="WARNING") as c,
    ):
        for kind, (definition, payload) in documents().items():
            for label in ("no schema", "enforce + payloads"):
                topic = f"/default/bench-{kind}-{'plain' if label == 'no schema' else 'validated'}"
                setup: Callable[[], None] | None = None
                if label != "no schema":

                    def setup(
                        topic: str = topic, kind: str = kind, definition: dict[str, object] = definition
                    ) -> None:
                        configure(c.service_url, topic, f"bench-{kind}", kind, definition)

                print(f"== {kind}, {label}, {len(payload)} B x {args.messages} ...", flush=True)
                res = asyncio.run(publish(c.service_url, topic, False, args.messages, payload, setup))
                rows.append((kind, label, len(payload), res))

    print()
    print(f"{'schema':<12} {'topic':<20} {'size':>6} {'msg/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for kind, label, size, r in rows:
        print(f"{kind:<12} {label:<20} {size:>6} {r['rate']:>10,.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}")
    for kind in ("json_schema", "avro"):
        plain = next(r for k, lbl, _, r in rows if k == kind and lbl == "no schema")
        checked = next(r for k, lbl, _, r in rows if k == kind and lbl != "no schema")
        print(
            f"{kind}: validated / plain throughput = {checked['rate'] / plain['rate']:.2f}; "
            f"validator alone {alone[kind]:,.0f} msg/s on one core"
        )


if __name__ == "__main__":
    main()
