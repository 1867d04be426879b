"""What the namespace publish rate limit costs on the hot path when it does not bind.

    .venv/bin/python bench/namespace_rate_limit.py [--messages 50000] [--rounds 3]

One local cluster (etcd + lookup + 1 broker), two namespaces: ``free`` has no policy (its
topics carry no limits object: one attribute check per batch), ``limited`` has a publish rate
limit far above what one producer can offer (``--limit`` msg/s and the same in KB/s), so every
batch goes through the rate's arithmetic and never waits. One SDK producer publishes as fast as
it can (pipelined, batched) 100-byte payloads to a non-reliable topic of each, alternating
(and which goes first), ``--rounds`` times; non-reliable topics keep the disk out of the measurement. Printed: msg/s per
run and the ratio limited / free of the medians, from the same run.

Then a check that the limit binds: a limit of ``--binding`` msg/s, the achieved rate printed
next to it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

import grpc
from reliable_publish import publish  # this directory: the same producer loop

from danube_common.grpc_util import strip_scheme
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc

PAYLOAD = b"x" * 100


def set_policies(admin_url: str, ns: str, **policies: float) -> None:
    with grpc.insecure_channel(strip_scheme(admin_url)) as ch:
        stub = apb_grpc.NamespaceAdminStub(ch)
        try:
            stub.CreateNamespace(apb.NamespaceRequest(name=ns), timeout=10)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
        if policies:
            stub.SetNamespacePolicies(
                apb.SetNamespacePoliciesRequest(name=ns, policies=apb.NamespacePolicies(**policies)),
                timeout=10,
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--limit", type=float, default=1e9, help="msg/s of the non-binding limit")
    p.add_argument("--binding", type=float, default=2_000, help="msg/s of the binding check")
    args = p.parse_args()

    from danube_local.cluster import LocalCluster

    rates: dict[str, list[float]] = {"free": [], "limited": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(brokers=1, workdir=Path(tmp), log_level="WARNING") as c,
    ):
        set_policies(c.admin_url, "free")
        set_policies(
            c.admin_url,
            "limited",
            publish_rate_msgs_per_s=args.limit,
            publish_rate_bytes_per_s=args.limit * 1000,
        )
        for rnd in range(args.rounds):
            for ns in ("free", "limited") if rnd % 2 == 0 else ("limited", "free"):
                topic = f"/{ns}/bench-{rnd}"
                res = asyncio.run(publish(c.service_url, topic, False, args.messages, PAYLOAD))
                rates[ns].append(res["rate"])
                print(
                    f"round {rnd} {ns:<8} {res['rate']:>10,.0f} msg/s  p50 {res['p50_ms']:.2f} ms", flush=True
                )
        set_policies(c.admin_url, "binding", publish_rate_msgs_per_s=args.binding)
        n = int(args.binding * 3)
        bound = asyncio.run(publish(c.service_url, "/binding/bench", False, n, PAYLOAD))

    free, limited = statistics.median(rates["free"]), statistics.median(rates["limited"])
    print()
    print(f"median free    {free:>10,.0f} msg/s")
    print(f"median limited {limited:>10,.0f} msg/s   (limit {args.limit:,.0f} msg/s, never binding)")
    print(f"limited / free = {limited / free:.3f}")
    print(f"binding limit {args.binding:,.0f} msg/s: achieved {bound['rate']:,.0f} msg/s over {n} messages")


if __name__ == "__main__":
    main()
