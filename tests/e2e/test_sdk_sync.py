"""The blocking SDK (``danube_sdk.sync``) against a real local cluster (etcd, lookup, brokers as
processes): typed errors, many threads sending and receiving at once, a WSGI app publishing
from its request handlers, the reader, and a script that exits without closing its client."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from danube_common.errors import TopicNotFound
from danube_local.cluster import LocalCluster
from danube_sdk.sync import (
    ClientClosed,
    ClientTimeout,
    DanubeClient,
    DispatchStrategy,
    InitialPosition,
    MessageId,
    SubType,
)
from danube_sdk.sync._runner import LOOP
from tests.e2e.conftest import ROOT
from tests.support import unique

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[DanubeClient]:
    c = DanubeClient(cluster.service_url)
    try:
        yield c
    finally:
        c.close()


def test_send_receive_ack_and_typed_errors(client: DanubeClient) -> None:
    topic = f"/default/{unique('sync')}"
    with pytest.raises(TopicNotFound):
        client.subscribe(topic, subscription="s")
    producer = client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)
    first = producer.send(b"m0")
    assert isinstance(first, MessageId) and first.offset == 0
    consumer = client.subscribe(topic, subscription="s", initial_position=InitialPosition.EARLIEST)
    fut = producer.send_async(b"m1", properties={"k": "v"})
    assert isinstance(fut, concurrent.futures.Future)
    assert fut.result(timeout=10).offset == 1
    got = []
    for msg in consumer:
        consumer.ack(msg)
        got.append((msg.offset, msg.payload, dict(msg.properties)))
        if len(got) == 2:
            break
    assert got == [(0, b"m0", {}), (1, b"m1", {"k": "v"})]
    with pytest.raises(ClientTimeout):
        consumer.receive(timeout_s=0.2)
    consumer.close()
    with pytest.raises(ClientClosed):
        consumer.receive()
    producer.close()
    with pytest.raises(ClientClosed):
        producer.send(b"late")


def test_many_threads_send_and_receive_at_once(client: DanubeClient) -> None:
    topic = f"/default/{unique('sync-mt')}"
    senders, per_sender, receivers = 8, 250, 4
    total = senders * per_sender
    producer = client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE, max_queued=64)
    consumer = client.subscribe(
        topic, subscription="s", sub_type=SubType.SHARED, initial_position=InitialPosition.EARLIEST
    )
    received: list[bytes] = []
    lock = threading.Lock()

    def send(sender: int) -> list[int]:
        futs = []
        for i in range(per_sender):
            payload = f"{sender}:{i}".encode()
            if i % 5 == 0:
                futs.append(producer.send(payload).offset)  # a blocking send now and then
            else:
                futs.append(producer.send_async(payload))
        return [f if isinstance(f, int) else f.result(timeout=30).offset for f in futs]

    def receive() -> None:
        while True:
            with lock:
                if len(received) >= total:
                    return
            try:
                msg = consumer.receive(timeout_s=0.5)
            except ClientTimeout:
                continue
            consumer.ack(msg)
            with lock:
                received.append(msg.payload)

    with concurrent.futures.ThreadPoolExecutor(senders + receivers) as pool:
        readers = [pool.submit(receive) for _ in range(receivers)]
        offsets = [f.result(timeout=60) for f in [pool.submit(send, s) for s in range(senders)]]
        for r in readers:
            r.result(timeout=60)
    for per_thread in offsets:
        assert per_thread == sorted(per_thread), "one thread's messages are stored in its order"
    assert sorted(o for per_thread in offsets for o in per_thread) == list(range(total))
    expected = sorted(f"{s}:{i}".encode() for s in range(senders) for i in range(per_sender))
    assert sorted(received) == expected, "nothing lost, nothing twice"


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_wsgi_app_publishes_from_its_request_handlers(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('sync-wsgi')}"
    client = DanubeClient(cluster.service_url)  # as an app would: one client, made at start-up
    producer = client.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE)

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        msg_id = producer.send(body, properties={"path": environ["PATH_INFO"]})
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"offset": msg_id.offset}).encode()]

    server = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    port = server.server_address[1]

    def post(i: int) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", "/orders", body=f"order-{i}".encode())
            resp = conn.getresponse()
            assert resp.status == 200
            return int(json.loads(resp.read())["offset"])
        finally:
            conn.close()

    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            offsets = list(pool.map(post, range(100)))
        assert sorted(offsets) == list(range(100))
        reader = client.create_reader(topic, start="earliest")
        bodies = {reader.receive(timeout_s=10).payload for _ in range(100)}
        assert bodies == {f"order-{i}".encode() for i in range(100)}
    finally:
        server.shutdown()
        server.server_close()
        client.close()


def test_reader_and_the_loop_thread_lifecycle(cluster: LocalCluster) -> None:
    assert not LOOP.running, "no client open: no loop thread"
    topic = f"/default/{unique('sync-rd')}"
    with DanubeClient(cluster.service_url) as client:
        thread = LOOP.thread
        assert thread is not None and thread.daemon and thread.is_alive()
        with DanubeClient(cluster.service_url) as other:
            assert LOOP.thread is thread, "one loop thread for every client"
            other.create_producer(topic, dispatch_strategy=DispatchStrategy.RELIABLE).send_many(
                [f"m{i}".encode() for i in range(5)]
            )
        assert thread.is_alive()
        with client.create_reader(topic, start=2) as reader:
            got = []
            for msg in reader:
                got.append((msg.offset, msg.payload))
                if len(got) == 3:
                    break
        assert got == [(i, f"m{i}".encode()) for i in range(2, 5)]
    thread.join(5)
    assert not thread.is_alive() and not LOOP.running, "the last close stops the loop thread"


_SCRIPT = """
import sys
from danube_sdk.sync import DanubeClient, DispatchStrategy
producer = DanubeClient(sys.argv[1]).create_producer(  # the client itself is not even kept
    sys.argv[2], dispatch_strategy=DispatchStrategy.RELIABLE
)
for i in range(200):
    producer.send_async(f"m{i}".encode())
print("queued", flush=True)
# no close: the interpreter must exit, and the at-exit close must flush what was queued
"""


def test_a_script_exits_without_closing_and_its_messages_are_flushed(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('sync-exit')}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("libs/client", "libs/common"))}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, cluster.service_url, topic],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "queued"
    with DanubeClient(cluster.service_url) as client:
        reader = client.create_reader(topic, start="earliest")
        got = [reader.receive(timeout_s=10).payload for _ in range(200)]
    assert got == [f"m{i}".encode() for i in range(200)]


def test_a_pattern_consumer_through_the_blocking_api(client: DanubeClient) -> None:
    """``subscribe_many`` with a pattern: two matching topics (one made after subscribing) merge
    into one blocking consumer; a topic that does not match stays out."""
    tag = unique("pat")
    first = client.create_producer(f"/default/{tag}-a", dispatch_strategy=DispatchStrategy.RELIABLE)
    first.send(b"create")
    other = client.create_producer(f"/default/x{tag}", dispatch_strategy=DispatchStrategy.RELIABLE)
    other.send(b"create")
    consumer = client.subscribe_many(pattern=f"/default/{tag}-.*", subscription="s", refresh_interval_s=0.2)
    later = client.create_producer(f"/default/{tag}-b", dispatch_strategy=DispatchStrategy.RELIABLE)
    later.send(b"b0")  # a topic found after subscribing starts at its earliest message
    first.send(b"a1")
    other.send(b"no")
    got = set()
    while len(got) < 2:
        msg = consumer.receive(timeout_s=20)
        got.add(msg.payload)
        consumer.ack(msg)
    assert got == {b"a1", b"b0"}
    with pytest.raises(ClientTimeout):
        consumer.receive(timeout_s=0.5)
    consumer.close()
