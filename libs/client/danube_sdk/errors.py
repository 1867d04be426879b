"""The errors an SDK user can meet: the shared hierarchy, plus the SDK's own few.

All are :class:`DanubeError` subclasses with a stable ``code`` and ``retryable``. Errors the
servers send arrive as the same classes the servers raised.
"""

from __future__ import annotations

from danube_common.errors import (
    AlreadyExists,
    ConsumerBusy,
    ConsumerNotFound,
    DanubeError,
    DiskFull,
    DispatchStrategyMismatch,
    FailedPrecondition,
    IncompatibleSchema,
    InvalidArgument,
    InvalidPayload,
    InvalidSchema,
    InvalidTopicName,
    MessageTooLarge,
    NamespaceNotFound,
    NoBrokerAvailable,
    NotFound,
    ProducerBusy,
    ProducerNotFound,
    ResourceExhausted,
    StorageError,
    StorageFailed,
    SubscriptionNotFound,
    SubscriptionTypeMismatch,
    Timeout,
    TopicNotFound,
    TopicNotOwned,
    Unavailable,
)


class ClientClosed(FailedPrecondition):
    """The client, producer or consumer was closed; nothing more can be sent or received."""

    code = "CLIENT_CLOSED"


class ClientTimeout(Timeout, TimeoutError):
    """A deadline of the SDK itself passed (``send_timeout_s``, ``receive(timeout_s=...)``).

    It is a :class:`Timeout` (code ``TIMEOUT``) and also the builtin ``TimeoutError``, so
    either ``except`` clause catches it.
    """


__all__ = [
    "AlreadyExists",
    "ClientClosed",
    "ClientTimeout",
    "ConsumerBusy",
    "ConsumerNotFound",
    "DanubeError",
    "DiskFull",
    "DispatchStrategyMismatch",
    "FailedPrecondition",
    "IncompatibleSchema",
    "InvalidArgument",
    "InvalidPayload",
    "InvalidSchema",
    "InvalidTopicName",
    "MessageTooLarge",
    "NamespaceNotFound",
    "NoBrokerAvailable",
    "NotFound",
    "ProducerBusy",
    "ProducerNotFound",
    "ResourceExhausted",
    "StorageError",
    "StorageFailed",
    "SubscriptionNotFound",
    "SubscriptionTypeMismatch",
    "Timeout",
    "TopicNotFound",
    "TopicNotOwned",
    "Unavailable",
]
