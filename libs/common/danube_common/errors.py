"""One error hierarchy for the whole system, and its mapping to and from gRPC status.

Every error has a stable ``code`` (never reworded: clients match on it), a gRPC status and
whether retrying can help. Servicers just raise; :class:`ErrorInterceptor` turns the error
into a status with trailing metadata, and :func:`error_from_rpc` turns that back into the
same class on the client side.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar

import grpc
import grpc.aio

from danube_common.grpc_wrap import rewrap

log = logging.getLogger(__name__)

# Trailing-metadata keys carried with every error status.
MD_ERROR_CODE = "x-danube-error-code"
MD_REDIRECT = "x-danube-redirect"


class DanubeError(Exception):
    """Base of every error the system raises on purpose (raise a subclass, not this)."""

    code: ClassVar[str] = "DANUBE_ERROR"
    grpc_status: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, redirect: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: For errors that send the client elsewhere: the broker URL to go to.
        self.redirect = redirect

    def __str__(self) -> str:
        return f"{self.message} [{self.code}]"


# ---- INVALID_ARGUMENT: the request itself is wrong; do not retry.
class InvalidArgument(DanubeError):
    code = "INVALID_ARGUMENT"
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class InvalidTopicName(InvalidArgument):
    code = "INVALID_TOPIC_NAME"


class InvalidNamespaceName(InvalidArgument):
    code = "INVALID_NAMESPACE_NAME"


class MessageTooLarge(InvalidArgument):
    code = "MESSAGE_TOO_LARGE"


class ConfigError(InvalidArgument):
    code = "CONFIG_ERROR"


class InvalidSchema(InvalidArgument):
    """A schema definition (or its type or compatibility mode) is malformed: it is refused at
    registration with what is wrong in it."""

    code = "INVALID_SCHEMA"


class IncompatibleSchema(InvalidArgument):
    """A schema breaks the subject's compatibility mode (or a producer's schema does not match
    the topic's): the message lists each rule broken."""

    code = "INCOMPATIBLE_SCHEMA"


class InvalidPayload(InvalidArgument):
    """A message does not validate against the topic's schema (the message says the subject,
    version and the validator's reason)."""

    code = "INVALID_PAYLOAD"


class UnsupportedCompression(InvalidArgument):
    """A message's payload is compressed with a codec this process does not know (a newer
    producer, or a damaged field): it is refused, never handed on as garbage."""

    code = "UNSUPPORTED_COMPRESSION"


# ---- NOT_FOUND
class NotFound(DanubeError):
    code = "NOT_FOUND"
    grpc_status = grpc.StatusCode.NOT_FOUND


class TopicNotFound(NotFound):
    code = "TOPIC_NOT_FOUND"


class NamespaceNotFound(NotFound):
    code = "NAMESPACE_NOT_FOUND"


class ProducerNotFound(NotFound):
    code = "PRODUCER_NOT_FOUND"


class ConsumerNotFound(NotFound):
    code = "CONSUMER_NOT_FOUND"


class SubscriptionNotFound(NotFound):
    code = "SUBSCRIPTION_NOT_FOUND"


class BrokerNotFound(NotFound):
    code = "BROKER_NOT_FOUND"


# ---- ALREADY_EXISTS (Danube clients treat this as fatal: use for admin calls only)
class AlreadyExists(DanubeError):
    code = "ALREADY_EXISTS"
    grpc_status = grpc.StatusCode.ALREADY_EXISTS


class TopicAlreadyExists(AlreadyExists):
    code = "TOPIC_ALREADY_EXISTS"


class NamespaceAlreadyExists(AlreadyExists):
    code = "NAMESPACE_ALREADY_EXISTS"


# ---- FAILED_PRECONDITION: the system is not in a state that allows the request.
class FailedPrecondition(DanubeError):
    code = "FAILED_PRECONDITION"
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class ProducerBusy(FailedPrecondition):
    """An exclusive producer holds the topic (or shared producers block an exclusive one)."""

    code = "PRODUCER_BUSY"


class ConsumerBusy(FailedPrecondition):
    """An exclusive subscription already has its consumer."""

    code = "CONSUMER_BUSY"


class SubscriptionTypeMismatch(FailedPrecondition):
    code = "SUBSCRIPTION_TYPE_MISMATCH"


class DispatchStrategyMismatch(FailedPrecondition):
    code = "DISPATCH_STRATEGY_MISMATCH"


class NamespaceNotEmpty(FailedPrecondition):
    code = "NAMESPACE_NOT_EMPTY"


class NoBrokerAvailable(FailedPrecondition):
    code = "NO_BROKER_AVAILABLE"
    grpc_status = grpc.StatusCode.UNAVAILABLE
    retryable = True


# ---- UNAVAILABLE: try again, possibly elsewhere.
class Unavailable(DanubeError):
    code = "UNAVAILABLE"
    grpc_status = grpc.StatusCode.UNAVAILABLE
    retryable = True


class TopicNotOwned(Unavailable):
    """This broker does not (or no longer) own the topic: look it up again."""

    code = "TOPIC_NOT_OWNED"


class ServiceShuttingDown(Unavailable):
    code = "SHUTTING_DOWN"


class ConnectionLost(Unavailable):
    """The call failed below the protocol (the peer died or the connection broke mid-call)."""

    code = "CONNECTION_LOST"


class MetadataUnavailable(Unavailable):
    code = "METADATA_UNAVAILABLE"


class TakeoverPending(Unavailable):
    """A reliable topic's new owner is waiting for the previous owner's log end to be recorded
    (its WAL uploader, the previous owner itself, or an operator's decision): retry later."""

    code = "TAKEOVER_PENDING"


class OwnershipUncertain(Unavailable):
    """The broker could not renew its registration lease in time, so it cannot be sure it still
    owns the topic: it refuses to acknowledge (the batch may or may not be stored; a re-send with
    the same sequence ids is deduplicated). Look the topic up again."""

    code = "OWNERSHIP_UNCERTAIN"


# ---- RESOURCE_EXHAUSTED: back-pressure; retry later.
class ResourceExhausted(DanubeError):
    code = "RESOURCE_EXHAUSTED"
    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED
    retryable = True


class ProducerQueueFull(ResourceExhausted):
    code = "PRODUCER_QUEUE_FULL"


class LimitExceeded(ResourceExhausted):
    """A configured limit (producers, consumers, subscriptions per topic) is reached."""

    code = "LIMIT_EXCEEDED"
    retryable = False


# Namespace policies (danube_common.namespace_policies): one class per limit.
class TooManyProducers(LimitExceeded):
    code = "TOO_MANY_PRODUCERS"


class TooManyConsumers(LimitExceeded):
    code = "TOO_MANY_CONSUMERS"


class TooManySubscriptions(LimitExceeded):
    code = "TOO_MANY_SUBSCRIPTIONS"


class TooManyTopics(LimitExceeded):
    code = "TOO_MANY_TOPICS"


class QuotaExceeded(ResourceExhausted):
    """A topic's backlog quota is reached and its policy is ``refuse``: the batch was not
    stored. Retrying helps once the subscriptions have acknowledged more."""

    code = "QUOTA_EXCEEDED"
    retryable = False


class StorageError(DanubeError):
    """A topic's write-ahead log could not store a commit: nothing of it was stored or acked."""

    code = "STORAGE_ERROR"
    grpc_status = grpc.StatusCode.UNAVAILABLE
    retryable = True


class DiskFull(StorageError, ResourceExhausted):
    """The disk (or quota) under the WAL is full: the commit was not stored; retry later."""

    code = "DISK_FULL"
    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED
    retryable = True


class StorageFailed(StorageError, Unavailable):
    """A write, fsync or file operation of the WAL failed (I/O error): the commit was not stored."""

    code = "STORAGE_FAILED"
    grpc_status = grpc.StatusCode.UNAVAILABLE
    retryable = True


class LogClosed(Unavailable):
    """The topic's log is closed (topic unloaded or broker stopping): look the topic up again."""

    code = "LOG_CLOSED"


class Timeout(DanubeError):
    code = "TIMEOUT"
    grpc_status = grpc.StatusCode.DEADLINE_EXCEEDED
    retryable = True


class DataLoss(DanubeError):
    code = "DATA_LOSS"
    grpc_status = grpc.StatusCode.DATA_LOSS


class CorruptData(DataLoss):
    code = "CORRUPT_DATA"


class HistoryConflict(DataLoss):
    """What etcd records about a reliable topic's log contradicts itself or the disk (two
    histories): the topic is refused rather than served wrongly; an operator must look."""

    code = "HISTORY_CONFLICT"


class Unauthenticated(DanubeError):
    """No identity, or one that could not be verified. ``reason`` is one stable word (missing,
    malformed, expired, bad_signature, wrong_issuer, missing_claim, ...: see
    ``danube_common.security.tokens.AuthFailure``); the message says what to do."""

    code = "UNAUTHENTICATED"
    grpc_status = grpc.StatusCode.UNAUTHENTICATED

    def __init__(self, message: str, *, reason: str = "", redirect: str | None = None) -> None:
        super().__init__(message, redirect=redirect)
        self.reason = reason


class TokenExpired(Unauthenticated):
    """The bearer token's ``exp`` has passed: get a new token (a client with a token supplier
    can retry with a fresh one)."""

    code = "TOKEN_EXPIRED"


class PermissionDenied(DanubeError):
    """The caller is known but no role bound to it grants the permission on the resource (the
    message names the principal, the permission and the resource)."""

    code = "PERMISSION_DENIED"
    grpc_status = grpc.StatusCode.PERMISSION_DENIED


class Internal(DanubeError):
    code = "INTERNAL"


class Cancelled(DanubeError):
    code = "CANCELLED"
    grpc_status = grpc.StatusCode.CANCELLED


def _all_subclasses(cls: type[DanubeError]) -> list[type[DanubeError]]:
    out: list[type[DanubeError]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


#: Stable code -> class. Codes are unique; a duplicate is a programming error.
ERRORS_BY_CODE: dict[str, type[DanubeError]] = {}
_ALL_ERRORS: list[type[DanubeError]] = [DanubeError, *_all_subclasses(DanubeError)]
for _cls in _ALL_ERRORS:
    ERRORS_BY_CODE.setdefault(_cls.code, _cls)

#: Fallback when a status carries no Danube code (e.g. from another server or grpc itself).
_BY_STATUS: dict[grpc.StatusCode, type[DanubeError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.DEADLINE_EXCEEDED: Timeout,
    grpc.StatusCode.DATA_LOSS: DataLoss,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def error_from_status(
    status: grpc.StatusCode, message: str, metadata: dict[str, str] | None = None
) -> DanubeError:
    """Build the error a status (plus our trailing metadata, when present) stands for."""
    md = metadata or {}
    cls = ERRORS_BY_CODE.get(md.get(MD_ERROR_CODE, ""))
    if cls is None and status in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        # Our servers put a code on every error they send, so a bare INTERNAL/UNKNOWN comes
        # from the transport: grpc reports a peer killed mid-call as "Internal error from Core".
        return ConnectionLost(f"connection to the server broke: {message or status.name}")
    if cls is None:
        cls = _BY_STATUS.get(status, Internal)
    # Our server formats messages as "<message> [CODE]"; strip the suffix to avoid doubling.
    suffix = f" [{cls.code}]"
    if message.endswith(suffix):
        message = message[: -len(suffix)]
    return cls(message, redirect=md.get(MD_REDIRECT) or None)


def error_from_rpc(exc: grpc.RpcError) -> DanubeError:
    """Map a failed gRPC call (sync or aio) to the matching DanubeError class."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    md: dict[str, str] = {}
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for item in trailing or ():
        key, value = item[0], item[1]
        md[key] = value.decode() if isinstance(value, bytes) else value
    return error_from_status(code, details or "", md)


def status_metadata(err: DanubeError) -> tuple[tuple[str, str], ...]:
    md: list[tuple[str, str]] = [(MD_ERROR_CODE, err.code)]
    if err.redirect:
        md.append((MD_REDIRECT, err.redirect))
    return tuple(md)


async def _abort(context: grpc.aio.ServicerContext, err: DanubeError) -> None:
    await context.abort(err.grpc_status, str(err), trailing_metadata=status_metadata(err))


def _unexpected(exc: Exception) -> Internal:
    log.exception("unexpected error in an RPC handler")
    return Internal(f"internal error: {type(exc).__name__}: {exc}")


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns DanubeError raised by a servicer into a gRPC status with trailing metadata.

    Any other exception is logged with its traceback and becomes INTERNAL with its text.
    """

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return rewrap(
            handler,
            unary_unary=_wrap_unary,
            stream_unary=_wrap_unary,
            unary_stream=_wrap_stream,
            stream_stream=_wrap_stream,
        )


def _wrap_unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(request, context)
        except DanubeError as err:
            await _abort(context, err)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, _unexpected(exc))

    return wrapper


def _wrap_stream(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            async for item in behavior(request, context):
                yield item
        except DanubeError as err:
            await _abort(context, err)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, _unexpected(exc))

    return wrapper
