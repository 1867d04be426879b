"""``danube-admin security ...``: RBAC roles and bindings, and JWT tokens.

``roles`` and ``bindings`` call the lookup's ``danube.admin.v1.SecurityAdmin`` service on the
admin URL (every call needs ``manage_cluster`` on the cluster). ``tokens`` work offline: they
sign or check a token with the cluster's key and call no server, so ``tokens create`` prints
the token alone and ``TOKEN=$(danube-admin security tokens create ...)`` works.

A token is accepted by a service when it is signed with the key of the service's
``auth.jwt`` section (the HS256 secret in ``auth.jwt.secret_file``; ``danube_local.secure``
writes it as ``jwt-secret``) and carries its ``auth.jwt.issuer`` (default ``danube``).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from danube_common.errors import ConfigError, Unauthenticated
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_sdk.cli.auth_flags import ENV_TOKEN
from danube_sdk.cli.output import FORMATS, emit, render_table

#: The secret itself (not a file), as Danube's CLI reads it.
ENV_SECRET = "DANUBE_JWT_SECRET_KEY"
#: ``auth.jwt.issuer``'s default in every service config (danube_common.security.config).
DEFAULT_ISSUER = "danube"
DEFAULT_TTL = "8760h"
#: ``auth.jwt.leeway_s``'s default: the clock skew ``tokens validate`` allows, as the services do.
LEEWAY_S = 5.0
#: ``danube_common.security.tokens``' algorithms (a unit test keeps them equal). The token code is
#: imported by the token commands only: ``danube_common.security`` (pydantic, cryptography, jwt)
#: would more than double every other command's start-up time.
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
ALGORITHMS = (*HMAC_ALGORITHMS, "RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
SCOPES = ("cluster", "namespace", "topic")
TOKEN_TYPES = ("user", "service_account")

_F = argparse.RawDescriptionHelpFormatter


# ---------------------------------------------------------------------------- client


@dataclass
class SecurityAdmin:
    """The SecurityAdmin stub and the deadline of every call (what the commands receive)."""

    stub: apb_grpc.SecurityAdminStub
    timeout_s: float

    @classmethod
    def connect(cls, channel: grpc.Channel, timeout_s: float) -> SecurityAdmin:
        return cls(apb_grpc.SecurityAdminStub(channel), timeout_s)


def _done(args: argparse.Namespace, text: str, data: Any) -> None:
    if args.output == "json":
        emit([], fmt="json", json_data=data)
    else:
        print(text)


def _fields(pairs: Sequence[tuple[str, Any]]) -> None:
    print(render_table([{"field": k, "value": v} for k, v in pairs], ("field", "value")))


def _time_s(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------- roles


def role_dict(r: apb.RoleInfo) -> dict[str, Any]:
    return {
        "name": r.name,
        "permissions": list(r.permissions),
        "description": r.description,
        "builtin": r.builtin,
    }


def split_permissions(raw: str) -> list[str]:
    """``"produce, consume"`` -> ``["produce", "consume"]`` (the server checks the names)."""
    perms = [p.strip() for p in raw.split(",") if p.strip()]
    if not perms:
        raise ConfigError("--permissions is empty: give at least one, e.g. --permissions lookup,produce")
    return perms


def roles_list(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    resp = admin.stub.ListRoles(apb.ListRolesRequest(), timeout=admin.timeout_s)
    data = [role_dict(r) for r in resp.roles]
    emit(data, fmt=args.output, columns=("name", "permissions", "builtin", "description"), json_data=data)


def roles_get(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    r = admin.stub.GetRole(apb.RoleRequest(name=args.name), timeout=admin.timeout_s)
    if args.output == "json":
        emit([], fmt="json", json_data=role_dict(r))
        return
    _fields(
        [
            ("name", r.name),
            ("permissions", list(r.permissions)),
            ("builtin", r.builtin),
            ("description", r.description),
        ]
    )


def roles_create(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    req = apb.CreateRoleRequest(
        name=args.name, permissions=split_permissions(args.permissions), description=args.description
    )
    r = admin.stub.CreateRole(req, timeout=admin.timeout_s)
    _done(args, f"created role {r.name}: {', '.join(r.permissions)}", role_dict(r))


def roles_update(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    req = apb.UpdateRoleRequest(name=args.name, permissions=split_permissions(args.permissions))
    if args.description is not None:
        req.description = args.description
    r = admin.stub.UpdateRole(req, timeout=admin.timeout_s)
    _done(args, f"role {r.name} now grants {', '.join(r.permissions)}", role_dict(r))


def roles_delete(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    resp = admin.stub.DeleteRole(apb.RoleRequest(name=args.name), timeout=admin.timeout_s)
    _done(args, f"deleted role {resp.name}", {"name": resp.name, "deleted": True})


# ---------------------------------------------------------------------------- bindings


def binding_dict(b: apb.BindingInfo) -> dict[str, Any]:
    return {
        "name": b.name,
        "principal": b.principal,
        "role": b.role,
        "scope": b.scope,
        "resource": b.resource,
    }


def binding_resource(scope: str, resource: str | None) -> str:
    """The resource as the API takes it: none at cluster scope, a namespace name (``/ns`` or
    ``ns``), a topic ``/ns/topic``. ConfigError saying what the scope needs."""
    if scope == "cluster":
        if resource:
            raise ConfigError(f"--scope cluster takes no --resource (got {resource!r})")
        return ""
    if not resource:
        example = "/analytics" if scope == "namespace" else "/analytics/clicks"
        raise ConfigError(f"--scope {scope} needs --resource (e.g. --resource {example})")
    if scope == "namespace" and resource.startswith("/") and resource.count("/") == 1:
        return resource[1:]
    return resource


def bindings_list(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    resp = admin.stub.ListBindings(
        apb.ListBindingsRequest(principal=args.principal or ""), timeout=admin.timeout_s
    )
    data = [binding_dict(b) for b in resp.bindings]
    emit(data, fmt=args.output, columns=("name", "principal", "role", "scope", "resource"), json_data=data)


def bindings_get(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    b = admin.stub.GetBinding(apb.BindingRequest(name=args.name), timeout=admin.timeout_s)
    if args.output == "json":
        emit([], fmt="json", json_data=binding_dict(b))
        return
    _fields(list(binding_dict(b).items()))


def bindings_create(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    info = apb.BindingInfo(
        name=args.name,
        principal=args.principal,
        role=args.role,
        scope=args.scope,
        resource=binding_resource(args.scope, args.resource),
    )
    b = admin.stub.CreateBinding(apb.CreateBindingRequest(binding=info), timeout=admin.timeout_s)
    where = "the cluster" if b.scope == "cluster" else f"{b.scope} {b.resource}"
    _done(args, f"created binding {b.name}: {b.principal} holds role {b.role} on {where}", binding_dict(b))


def bindings_delete(admin: SecurityAdmin, args: argparse.Namespace) -> None:
    resp = admin.stub.DeleteBinding(apb.BindingRequest(name=args.name), timeout=admin.timeout_s)
    _done(args, f"deleted binding {resp.name}", {"name": resp.name, "deleted": True})


# ---------------------------------------------------------------------------- tokens

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+)([smhdw])")


def parse_duration(text: str) -> float:
    """``30s``, ``15m``, ``1h30m``, ``30d``, ``8760h`` -> seconds (argparse type: usage error
    saying what is allowed)."""
    raw = text.strip().lower()
    if not raw or _DURATION.sub("", raw):
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number with a unit, e.g. 30m, 1h, 30d, 8760h "
            "(units s, m, h, d, w; combined like 1h30m)"
        )
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _DURATION.findall(raw))
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must be longer than 0 s")
    return float(seconds)


def _read_file(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {flag} {path}: {exc.strerror or exc}") from exc


def token_key(args: argparse.Namespace, env: dict[str, str], *, signing: bool) -> bytes:
    """The key a token is signed (``signing``) or checked with.

    HS*: ``--secret-file`` (its text, surrounding whitespace ignored, as the services read
    ``auth.jwt.secret_file``), else ``$DANUBE_JWT_SECRET_KEY``. RS*/ES*: the PEM of
    ``--private-key-file`` (to sign) or ``--public-key-file`` (to check).
    """
    if args.algorithm in HMAC_ALGORITHMS:
        if args.secret_file:
            return _read_file(args.secret_file, "--secret-file").strip()
        if env.get(ENV_SECRET, "").strip():
            return env[ENV_SECRET].strip().encode()
        raise ConfigError(
            f"no {args.algorithm} secret: give --secret-file PATH (the cluster's auth.jwt.secret_file; "
            f"a local secure cluster keeps it in jwt-secret) or set {ENV_SECRET} to the secret"
        )
    flag, path = (
        ("--private-key-file", args.private_key_file)
        if signing
        else ("--public-key-file", args.public_key_file)
    )
    if not path:
        raise ConfigError(f"{args.algorithm} tokens need {flag} PATH (a PEM key)")
    return _read_file(path, flag)


def tokens_create(_admin: object, args: argparse.Namespace) -> None:
    from danube_common.security.principal import validate_principal_name
    from danube_common.security.tokens import issue_token

    if not args.subject.strip():
        raise ConfigError("--subject is empty: give the name the token is for (its sub claim)")
    name = validate_principal_name(args.principal_name or args.subject)
    key = token_key(args, dict(os.environ), signing=True)
    now = time.time()
    token = issue_token(args.subject, args.type, name, args.ttl, key, args.issuer, args.algorithm, now=now)
    if args.output == "json":
        expires = int(now + args.ttl)
        emit(
            [],
            fmt="json",
            json_data={
                "token": token,
                "subject": args.subject,
                "principal": f"{args.type}:{name}",
                "issuer": args.issuer,
                "algorithm": args.algorithm,
                "expires_at": _time_s(expires),
                "exp": expires,
            },
        )
    else:
        print(token)


def read_token(args: argparse.Namespace) -> str:
    """``--token``, else ``--token-file``, else ``$DANUBE_TOKEN`` (as the other commands)."""
    token, token_file = getattr(args, "token", None), getattr(args, "token_file", None)
    if token is not None and token_file is not None:
        raise ConfigError("give --token or --token-file, not both")
    if token is not None:
        text = token
    elif token_file is not None:
        text = _read_file(token_file, "--token-file").decode("utf-8", errors="replace")
    elif getattr(args, "env_token", None):
        text = str(args.env_token)
    else:
        raise ConfigError(f"no token to check: give --token JWT, --token-file PATH or set {ENV_TOKEN}")
    text = text.strip()
    if text.lower().startswith("bearer "):
        text = text[len("bearer ") :].strip()
    return text


def tokens_validate(_admin: object, args: argparse.Namespace) -> None:
    import jwt

    from danube_common.security.tokens import TokenVerifier

    token = read_token(args)
    key = token_key(args, dict(os.environ), signing=False)
    verifier = TokenVerifier(
        key=key, issuer=args.issuer, algorithm=args.algorithm, leeway_s=LEEWAY_S, cache_ttl_s=0
    )
    try:
        claims = verifier.verify(token)
    except Unauthenticated as err:
        if args.output == "json":
            emit([], fmt="json", json_data={"valid": False, "reason": err.reason, "error": err.message})
        raise
    # Verified: the payload (iat and any other claim) is safe to show as it is.
    payload = jwt.decode(token, options={"verify_signature": False})
    left = claims.expires_at - time.time()
    if args.output == "json":
        emit(
            [],
            fmt="json",
            json_data={
                "valid": True,
                "principal": f"{claims.principal_type.value}:{claims.principal_name}",
                "expires_at": _time_s(claims.expires_at),
                "claims": payload,
            },
        )
        return
    iat = payload.get("iat")
    _fields(
        [
            ("valid", True),
            ("subject", claims.subject),
            ("principal", f"{claims.principal_type.value}:{claims.principal_name}"),
            ("issuer", claims.issuer),
            ("issued_at", _time_s(iat) if isinstance(iat, int | float) else ""),
            ("expires_at", f"{_time_s(claims.expires_at)} (in {_human(left)})"),
        ]
    )


def _human(seconds: float) -> str:
    """``93784`` -> ``1d2h``: the two largest units."""
    s = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size or (unit == "s" and not parts):
            parts.append(f"{s // size}{unit}")
            s %= size
        if len(parts) == 2:
            break
    return "".join(parts)


# ---------------------------------------------------------------------------- parsers

Leaf = Callable[..., argparse.ArgumentParser]
Group = Callable[[str, str, Sequence[str]], "argparse._SubParsersAction[Any]"]


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _offline_common() -> argparse.ArgumentParser:
    """The options of the offline token commands (no admin URL, deadline or auth flags)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--output", "-o", choices=FORMATS, default=argparse.SUPPRESS, help="table (default) or json"
    )
    return p


def _key_args(p: argparse.ArgumentParser, *, signing: bool) -> None:
    p.add_argument(
        "--issuer",
        default=DEFAULT_ISSUER,
        help=f"the iss claim: the cluster's auth.jwt.issuer (default {DEFAULT_ISSUER}, the services' default)",
    )
    p.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default="HS256",
        help="the cluster's auth.jwt.algorithm (default HS256)",
    )
    p.add_argument(
        "--secret-file",
        metavar="PATH",
        help=f"HS*: the file holding the HMAC secret (the cluster's auth.jwt.secret_file); default: ${ENV_SECRET}",
    )
    if signing:
        p.add_argument("--private-key-file", metavar="PEM", help="RS*/ES*: the private key to sign with")
    else:
        p.add_argument(
            "--public-key-file",
            metavar="PEM",
            help="RS*/ES*: the public key (the cluster's auth.jwt.public_key_file)",
        )


def add_security_parsers(group: Group, leaf: Leaf) -> None:
    """The ``security`` group: ``roles``, ``bindings`` (admin API) and ``tokens`` (offline)."""
    sec = group(
        "security",
        "RBAC roles and bindings (need manage_cluster), and JWT tokens (made and checked offline)",
        [
            "danube-admin security roles list",
            "danube-admin security roles create publisher --permissions lookup,produce",
            "danube-admin security bindings create alice-orders --principal user:alice --role publisher \\",
            "    --scope namespace --resource orders",
            "TOKEN=$(danube-admin security tokens create --subject alice --secret-file jwt-secret --ttl 30d)",
        ],
    )

    def subgroup(name: str, help_: str, examples: Sequence[str]) -> argparse._SubParsersAction[Any]:
        p = sec.add_parser(
            name, help=help_, description=help_, formatter_class=_F, epilog=_examples(*examples)
        )
        return p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def online(subs: argparse._SubParsersAction[Any], *a: Any, **kw: Any) -> argparse.ArgumentParser:
        p = leaf(subs, *a, **kw)
        p.set_defaults(connect=SecurityAdmin.connect)
        return p

    offline_common = _offline_common()

    def offline(
        subs: argparse._SubParsersAction[Any],
        name: str,
        help_: str,
        func: Callable[[object, argparse.Namespace], None],
        examples: Sequence[str],
    ) -> argparse.ArgumentParser:
        p = subs.add_parser(
            name,
            help=help_,
            description=help_,
            parents=[offline_common],
            formatter_class=_F,
            epilog=_examples(*examples),
        )
        p.set_defaults(func=func, connect=None)  # no server call
        return p

    # ---- roles
    r = subgroup(
        "roles",
        "roles: named sets of permissions (built-in: admin, cluster-service, producer, consumer)",
        [
            "danube-admin security roles list",
            "danube-admin security roles create auditor --permissions lookup",
        ],
    )
    online(
        r,
        "list",
        "list roles (built-in ones first) with their permissions",
        roles_list,
        ["danube-admin security roles list", "danube-admin security roles list -o json"],
    )
    p = online(r, "get", "show a role", roles_get, ["danube-admin security roles get producer"])
    p.add_argument("name", help="role name")
    perms_help = (
        "comma-separated: lookup, produce, consume, manage_namespace, manage_topic, manage_schema, "
        "manage_broker, manage_cluster, cluster_internal"
    )
    p = online(
        r,
        "create",
        "create a role (a built-in role's name is refused)",
        roles_create,
        [
            "danube-admin security roles create publisher --permissions lookup,produce",
            "danube-admin security roles create ops --permissions lookup,manage_topic,manage_broker "
            "--description 'on call'",
        ],
    )
    p.add_argument("name", help="role name: 1-100 letters, digits, '_', '-' or '.'")
    p.add_argument("--permissions", "-p", required=True, metavar="P1,P2", help=perms_help)
    p.add_argument("--description", default="", help="what the role is for")
    p = online(
        r,
        "update",
        "replace a stored role's permissions (bindings that name it grant the new set at once)",
        roles_update,
        ["danube-admin security roles update publisher --permissions lookup,produce,consume"],
    )
    p.add_argument("name", help="role name")
    p.add_argument("--permissions", "-p", required=True, metavar="P1,P2", help=perms_help)
    p.add_argument("--description", help="a new description (default: kept)")
    p = online(
        r,
        "delete",
        "delete a stored role (refused for built-in roles and while a binding names it)",
        roles_delete,
        ["danube-admin security roles delete publisher"],
    )
    p.add_argument("name", help="role name")

    # ---- bindings
    b = subgroup(
        "bindings",
        "bindings: a principal holds a role on the cluster, a namespace or a topic",
        [
            "danube-admin security bindings list --principal user:alice",
            "danube-admin security bindings create ops-all --principal user:bob --role admin --scope cluster",
        ],
    )
    p = online(
        b,
        "list",
        "list bindings (every principal's, or one's)",
        bindings_list,
        ["danube-admin security bindings list", "danube-admin security bindings list --principal user:alice"],
    )
    p.add_argument("--principal", metavar="TYPE:NAME", help="only this principal's (e.g. user:alice)")
    p = online(b, "get", "show a binding", bindings_get, ["danube-admin security bindings get alice-orders"])
    p.add_argument("name", help="binding name")
    p = online(
        b,
        "create",
        "grant a principal a role on the cluster, a namespace (and its topics) or one topic (and its "
        "partitions). The principal is a token's principal_type:principal_name, or user:COMMON_NAME for "
        "a client certificate",
        bindings_create,
        [
            "danube-admin security bindings create root-admin --principal user:root --role admin --scope cluster",
            "danube-admin security bindings create billing-orders --principal service_account:billing \\",
            "    --role consumer --scope namespace --resource orders",
            "danube-admin security bindings create alice-clicks --principal user:alice --role producer \\",
            "    --scope topic --resource /analytics/clicks",
        ],
    )
    p.add_argument("name", help="binding name: 1-100 letters, digits, '_', '-' or '.'")
    p.add_argument(
        "--principal",
        required=True,
        metavar="TYPE:NAME",
        help="user:NAME, service_account:NAME or broker_internal:NAME",
    )
    p.add_argument("--role", required=True, help="a built-in or stored role")
    p.add_argument("--scope", required=True, choices=SCOPES, help="where the role applies")
    p.add_argument(
        "--resource",
        metavar="NAME",
        help="namespace scope: the namespace (ns or /ns); topic scope: /ns/topic; cluster scope: none",
    )
    p = online(
        b,
        "delete",
        "revoke a binding (services stop honouring it within their watch latency)",
        bindings_delete,
        ["danube-admin security bindings delete alice-orders"],
    )
    p.add_argument("name", help="binding name")

    # ---- tokens
    t = subgroup(
        "tokens",
        "JWT bearer tokens, made and checked offline with the cluster's key (no server call)",
        [
            "danube-admin security tokens create --subject alice --secret-file .danube-local/secure/jwt-secret",
            f"{ENV_SECRET}=$(cat jwt-secret) danube-admin security tokens create --subject etl "
            "--type service_account --ttl 30d",
            "danube-admin security tokens validate --token-file alice.jwt --secret-file jwt-secret",
        ],
    )
    p = offline(
        t,
        "create",
        "sign a token and print it (only the token: TOKEN=$(...) works; -o json adds its claims). "
        "Bind its principal (TYPE:NAME) a role for it to be allowed anything",
        tokens_create,
        [
            "danube-admin security tokens create --subject alice --secret-file jwt-secret > alice.jwt",
            "danube-admin security tokens create --subject billing --type service_account --ttl 30d \\",
            "    --secret-file jwt-secret",
            "danube-admin security tokens create --subject ci --ttl 1h --algorithm ES256 --private-key-file jwt.key",
        ],
    )
    p.add_argument("--subject", required=True, help="the sub claim (super_admins may name it)")
    p.add_argument(
        "--type",
        choices=TOKEN_TYPES,
        default="user",
        help="principal_type: user (default) or service_account",
    )
    p.add_argument(
        "--principal-name",
        metavar="NAME",
        help="principal_name (default: the subject); bindings name TYPE:NAME",
    )
    p.add_argument(
        "--ttl",
        type=parse_duration,
        default=parse_duration(DEFAULT_TTL),
        metavar="DURATION",
        help=f"valid this long: 30m, 1h, 30d, 8760h ... (default {DEFAULT_TTL})",
    )
    _key_args(p, signing=True)
    p = offline(
        t,
        "validate",
        "check a token as the services do (signature, issuer, expiry, claims) and print its claims; "
        "exit status 1 with the reason when it is not valid",
        tokens_validate,
        [
            "danube-admin security tokens validate --token-file alice.jwt --secret-file jwt-secret",
            f"{ENV_TOKEN}=$TOKEN danube-admin security tokens validate --secret-file jwt-secret -o json",
        ],
    )
    p.add_argument("--token", default=argparse.SUPPRESS, metavar="JWT", help="the token to check")
    p.add_argument(
        "--token-file",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help=f"read the token from this file (default: ${ENV_TOKEN})",
    )
    _key_args(p, signing=False)
