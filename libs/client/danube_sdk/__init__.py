"""Danube for Python: the asyncio client SDK.

from danube_sdk import DanubeClient

async with DanubeClient("http://127.0.0.1:6650") as client:
    producer = await client.create_producer("/default/t")
    await producer.send(b"hello")
    consumer = await client.subscribe("/default/t", subscription="s")
    msg = await consumer.receive()
    await consumer.ack(msg)
"""

from danube_common.errors import DanubeError
from danube_sdk.client import DanubeClient
from danube_sdk.consumer import Consumer
from danube_sdk.errors import ClientClosed, ClientTimeout
from danube_sdk.producer import Producer
from danube_sdk.routing import fnv1a64
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
    "DanubeError",
    "DispatchStrategy",
    "InitialPosition",
    "Message",
    "MessageId",
    "Producer",
    "RoutingMode",
    "SubType",
    "fnv1a64",
]
