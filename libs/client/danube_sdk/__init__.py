"""Danube for Python: the asyncio client SDK.

from danube_sdk import DanubeClient

async with DanubeClient("http://127.0.0.1:6650") as client:
    producer = await client.create_producer("/default/t")
    await producer.send(b"hello")
    consumer = await client.subscribe("/default/t", subscription="s")
    msg = await consumer.receive()
    await consumer.ack(msg)

Typed values with the schema registry (see danube_sdk.schemas):

    schema = JsonSchema(Order, subject="orders")        # a pydantic model or a dataclass
    producer = await client.create_producer("/default/orders", schema=schema)
    await producer.send(Order(id=1))
    consumer = await client.subscribe("/default/orders", subscription="s", schema=schema)
    order = (await consumer.receive()).value()

A reader (a reliable topic from a position, nothing stored): ``await
client.create_reader("/default/t", start="earliest")``. The blocking API for scripts, threads and
WSGI apps is :mod:`danube_sdk.sync` (the same names).

A secured cluster (TLS, a client certificate for mTLS, a JWT on every call):

    client = DanubeClient(
        "https://localhost:6650",
        tls=TlsOptions(ca_file="ca.pem", cert_file="client.pem", key_file="client.key"),
        token=jwt,                # or token_supplier=fetch_jwt (called before every RPC)
    )
"""

from danube_common.compression import Compression
from danube_common.errors import DanubeError
from danube_sdk.auth import TlsOptions, TokenSupplier
from danube_sdk.client import DanubeClient
from danube_sdk.consumer import Consumer
from danube_sdk.errors import ClientClosed, ClientTimeout, PermissionDenied, Unauthenticated
from danube_sdk.multi_consumer import MultiTopicConsumer
from danube_sdk.producer import Producer
from danube_sdk.reader import Reader
from danube_sdk.routing import fnv1a64
from danube_sdk.schema_registry import (
    CompatibilityCheck,
    RegisteredSchema,
    SchemaInfo,
    SchemaRegistryClient,
    SchemaVersion,
    SubjectSummary,
    TopicSchemaConfig,
)
from danube_sdk.schemas import AvroSchema, JsonSchema, ProtobufSchema, Schema, SchemaReference
from danube_sdk.start_position import StartPosition
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
    "AvroSchema",
    "ClientClosed",
    "ClientTimeout",
    "CompatibilityCheck",
    "Compression",
    "Consumer",
    "DanubeClient",
    "DanubeError",
    "DispatchStrategy",
    "InitialPosition",
    "JsonSchema",
    "Message",
    "MessageId",
    "MultiTopicConsumer",
    "PermissionDenied",
    "Producer",
    "ProtobufSchema",
    "Reader",
    "RegisteredSchema",
    "RoutingMode",
    "Schema",
    "SchemaInfo",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaVersion",
    "StartPosition",
    "SubType",
    "SubjectSummary",
    "TlsOptions",
    "TokenSupplier",
    "TopicSchemaConfig",
    "Unauthenticated",
    "fnv1a64",
]
