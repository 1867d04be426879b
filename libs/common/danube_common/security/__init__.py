"""Security: TLS/mTLS credentials, JWT authentication, default-deny RBAC, and the server
interceptor that applies them to every RPC.

- :mod:`.tls`: ``TlsConfig`` (a service config field), server/channel credentials, peer identity;
- :mod:`.tokens`: ``issue_token``, ``TokenVerifier`` (cached), ``AuthFailure`` reasons;
- :mod:`.principal`: ``Principal`` (``type:name``) and how it was established;
- :mod:`.rbac`: permissions, roles, bindings, resources, the decision (pure);
- :mod:`.rules`: ``RULES``, the permission and resource of every RPC;
- :mod:`.handles`: who may use a producer or consumer by its id (its creator);
- :mod:`.security_store` / :mod:`.security_view`: roles and bindings in etcd, and their cache;
- :mod:`.config`: the ``auth:`` config section;
- :mod:`.interceptor`: ``AuthInterceptor``.
"""

from danube_common.security.config import AuthConfig, JwtConfig
from danube_common.security.interceptor import Authenticator, AuthInterceptor, current_principal
from danube_common.security.principal import AuthSource, Principal, PrincipalType
from danube_common.security.rbac import (
    BUILTIN_ROLES,
    Authorizer,
    Binding,
    Permission,
    Resource,
    Role,
    Scope,
    StaticPolicy,
)
from danube_common.security.rules import RULES, Handle, HandleInfo, Rule
from danube_common.security.security_store import SecurityStore
from danube_common.security.security_view import SecurityView
from danube_common.security.tls import TlsConfig, bind_server, channel_credentials, server_credentials
from danube_common.security.tokens import AuthFailure, TokenVerifier, issue_token

__all__ = [
    "BUILTIN_ROLES",
    "RULES",
    "AuthConfig",
    "AuthFailure",
    "AuthInterceptor",
    "AuthSource",
    "Authenticator",
    "Authorizer",
    "Binding",
    "Handle",
    "HandleInfo",
    "JwtConfig",
    "Permission",
    "Principal",
    "PrincipalType",
    "Resource",
    "Role",
    "Rule",
    "Scope",
    "SecurityStore",
    "SecurityView",
    "StaticPolicy",
    "TlsConfig",
    "TokenVerifier",
    "bind_server",
    "channel_credentials",
    "current_principal",
    "issue_token",
    "server_credentials",
]
