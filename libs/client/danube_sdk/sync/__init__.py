"""Danube for Python: the blocking SDK, for scripts, threads and WSGI apps.

    from danube_sdk.sync import DanubeClient

    with DanubeClient("http://127.0.0.1:6650") as client:
        producer = client.create_producer("/default/t")
        msg_id = producer.send(b"hello")                 # waits for the ack
        fut = producer.send_async(b"more")               # a concurrent.futures.Future[MessageId]
        consumer = client.subscribe("/default/t", subscription="s")
        msg = consumer.receive(timeout_s=5)
        consumer.ack(msg)
        for msg in client.create_reader("/default/ledger", start="earliest"):
            ...

The asyncio client (:mod:`danube_sdk`) runs on one background thread with its own event loop,
shared by every blocking client of the process (started with the first, stopped with the last,
a daemon). Every method may be called from any thread. Errors are the asyncio SDK's classes.
"""

from danube_sdk.errors import ClientClosed, ClientTimeout
from danube_sdk.start_position import StartPosition
from danube_sdk.sync.client import DanubeClient
from danube_sdk.sync.consumer import Consumer, Reader
from danube_sdk.sync.producer import Producer
from danube_sdk.types import (
    AccessMode,
    DispatchStrategy,
    InitialPosition,
    Message,
    MessageId,
    RoutingMode,
    SubType,
)

__all__ = [
    "AccessMode",
    "ClientClosed",
    "ClientTimeout",
    "Consumer",
    "DanubeClient",
    "DispatchStrategy",
    "InitialPosition",
    "Message",
    "MessageId",
    "Producer",
    "Reader",
    "RoutingMode",
    "StartPosition",
    "SubType",
]
