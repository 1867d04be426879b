"""Who is calling: the principal an RPC runs as, and how it was established.

A principal is written ``{type}:{name}`` (``user:alice``, ``service_account:billing``,
``broker_internal:broker-1``): that string is what role bindings name. The types are Danube's:
``user`` and ``service_account`` come from JWT claims; ``broker_internal`` is a cluster member.
Only a ``broker_internal`` principal established by a verified client certificate (``via`` mTLS)
is trusted as a cluster member; a token that merely *claims* ``broker_internal`` gets nothing
beyond its bindings (internal identities come from mTLS, never from shared secrets).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from danube_common.errors import InvalidArgument


class PrincipalType(StrEnum):
    USER = "user"
    SERVICE_ACCOUNT = "service_account"
    BROKER_INTERNAL = "broker_internal"


class AuthSource(StrEnum):
    """How the identity was established."""

    JWT = "jwt"
    MTLS = "mtls"
    #: Authentication is disabled on this server: everyone is anonymous and everything is allowed.
    ANONYMOUS = "anonymous"


#: A principal name: what a JWT ``principal_name`` or a certificate name may be.
_NAME = re.compile(r"^[A-Za-z0-9_.@:*\-]{1,200}$")


def validate_principal_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidArgument(
            f"invalid principal name {name!r}: use 1-200 letters, digits, '_', '.', '@', ':', '-'"
        )
    return name


def parse_principal(text: str) -> tuple[PrincipalType, str]:
    """``"user:alice"`` -> (USER, "alice"); InvalidArgument saying what is allowed otherwise."""
    kind, sep, name = text.partition(":")
    allowed = ", ".join(t.value for t in PrincipalType)
    if not sep or kind not in {t.value for t in PrincipalType}:
        raise InvalidArgument(
            f"invalid principal {text!r}: write it as TYPE:NAME with TYPE one of {allowed} (e.g. user:alice)"
        )
    return PrincipalType(kind), validate_principal_name(name)


@dataclass(frozen=True, slots=True)
class Principal:
    type: PrincipalType
    name: str
    source: AuthSource
    #: The JWT ``sub`` (or the certificate's common name); super-admin lists may name it.
    subject: str = ""
    #: Unix time (s) after which the identity is no longer valid (a token's ``exp``); None: never.
    expires_at: float | None = None

    def __str__(self) -> str:
        return f"{self.type.value}:{self.name}"

    @property
    def is_cluster_member(self) -> bool:
        """A Danube service proven by its certificate (not a token that claims to be one)."""
        return self.type is PrincipalType.BROKER_INTERNAL and self.source is AuthSource.MTLS


ANONYMOUS = Principal(PrincipalType.USER, "anonymous", AuthSource.ANONYMOUS)
