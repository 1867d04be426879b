"""The errors an SDK user can meet: the shared hierarchy, plus the SDK's own few.

All are :class:`DanubeError` subclasses with a stable ``code`` and ``retryable``. Errors the
servers send arrive as the same classes the servers raised.
"""

from __future__ import annotations

from danube_common.errors import (
    AlreadyExists,
    ConsumerBusy,
    ConsumerNotFound,
    CorruptData,
    DanubeError,
    DiskFull,
    DispatchStrategyMismatch,
    FailedPrecondition,
    IncompatibleSchema,
    InvalidArgument,
    InvalidPayload,
    InvalidSchema,
    InvalidTopicName,
    LimitExceeded,
    MessageTooLarge,
    NamespaceNotFound,
    NoBrokerAvailable,
    NotFound,
    PermissionDenied,
    ProducerBusy,
    ProducerNotFound,
    QuotaExceeded,
    ResourceExhausted,
    StorageError,
    StorageFailed,
    SubscriptionNotFound,
    SubscriptionTypeMismatch,
    Timeout,
    TooManyConsumers,
    TooManyProducers,
    TooManySubscriptions,
    TooManyTopics,
    TopicNotFound,
    TopicNotOwned,
    Unauthenticated,
    Unavailable,
    UnsupportedCompression,
)


class ClientClosed(FailedPrecondition):
    """The client, producer or consumer was closed; nothing more can be sent or received."""

    code = "CLIENT_CLOSED"


class ClientTimeout(Timeout, TimeoutError):
    """A deadline of the SDK itself passed (``send_timeout_s``, ``receive(timeout_s=...)``).

    It is a :class:`Timeout` (code ``TIMEOUT``) and also the builtin ``TimeoutError``, so
    either ``except`` clause catches it.
    """


#: What to do about a refused call, added once to the server's reason (see :func:`with_auth_hint`).
UNAUTHENTICATED_HINT = (
    "the call needs a valid token: give the client a JWT minted for this cluster, not expired "
    "(DanubeClient(token=...) or token_supplier=...; on the command line --token, --token-file or "
    "DANUBE_TOKEN)"
)
PERMISSION_DENIED_HINT = (
    "the token is valid but its subject may not do this here: ask an administrator to bind it a "
    "role granting the permission on this topic, its namespace or the cluster"
)


def with_auth_hint(err: DanubeError) -> DanubeError:
    """``err`` as it is, or for Unauthenticated / PermissionDenied the same class with what to
    do appended to the server's reason (the SDK's boundary calls this once per failure)."""
    if isinstance(err, Unauthenticated):
        hint = UNAUTHENTICATED_HINT
    elif isinstance(err, PermissionDenied):
        hint = PERMISSION_DENIED_HINT
    else:
        return err
    if hint in err.message:
        return err
    return type(err)(f"{err.message} ({hint})", redirect=err.redirect)


__all__ = [
    "AlreadyExists",
    "ClientClosed",
    "ClientTimeout",
    "ConsumerBusy",
    "ConsumerNotFound",
    "CorruptData",
    "DanubeError",
    "DiskFull",
    "DispatchStrategyMismatch",
    "FailedPrecondition",
    "IncompatibleSchema",
    "InvalidArgument",
    "InvalidPayload",
    "InvalidSchema",
    "InvalidTopicName",
    "LimitExceeded",
    "MessageTooLarge",
    "NamespaceNotFound",
    "NoBrokerAvailable",
    "NotFound",
    "PermissionDenied",
    "ProducerBusy",
    "ProducerNotFound",
    "QuotaExceeded",
    "ResourceExhausted",
    "StorageError",
    "StorageFailed",
    "SubscriptionNotFound",
    "SubscriptionTypeMismatch",
    "Timeout",
    "TooManyConsumers",
    "TooManyProducers",
    "TooManySubscriptions",
    "TooManyTopics",
    "TopicNotFound",
    "TopicNotOwned",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedCompression",
    "with_auth_hint",
]
