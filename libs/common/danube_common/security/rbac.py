"""Role-based access control: permissions, roles, bindings, and the decision (pure functions).

**Permissions** are Danube's, plus one for service-to-service calls:

==================  =============================================================================
lookup              find topics (lookup, partitions, health), and every read-only view: describe,
                    stats, lists, schema reads, leaders, load report, plans, service status
produce             create producers and publish
consume             subscribe, receive, ack/nack, seek, close consumers
manage_namespace    create and delete namespaces
manage_topic        create and delete topics, set subscription policies
manage_schema       register / delete schema versions, compatibility modes, topic schema settings
manage_broker       change a broker's admin state (drain / activate)
manage_cluster      rebalancing (request, apply plans), moving and pinning topics, force-takeover
cluster_internal    service-to-service RPCs: leader campaigns, WAL uploader flushes, the brokers'
                    stats service. Danube calls its internal permission ``Replicate``; this
                    system replicates nothing over RPC, so the name says what it gates.
==================  =============================================================================

A **role** is a named set of permissions; a **binding** gives one principal (``user:alice``) one
role at one scope: the whole cluster, a namespace, or a topic. A check of permission P on a
resource walks the resource's **lineage** (a partition, its partitioned topic, the namespace,
the cluster) and allows when any binding of the principal at any step holds a role with P.
Nothing else allows: **default deny** (a binding naming a missing role grants nothing).

Super-admin subjects (configured, not stored) bypass RBAC. A cluster member proven by mTLS
(:attr:`Principal.is_cluster_member`) holds the built-in ``cluster-service`` role at cluster
scope without a stored binding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from danube_common.errors import InvalidArgument, PermissionDenied
from danube_common.security.principal import Principal, parse_principal
from danube_common.topic_name import TopicName, validate_namespace


class Permission(StrEnum):
    LOOKUP = "lookup"
    PRODUCE = "produce"
    CONSUME = "consume"
    MANAGE_NAMESPACE = "manage_namespace"
    MANAGE_TOPIC = "manage_topic"
    MANAGE_SCHEMA = "manage_schema"
    MANAGE_BROKER = "manage_broker"
    MANAGE_CLUSTER = "manage_cluster"
    CLUSTER_INTERNAL = "cluster_internal"


_PERMISSION_VALUES = frozenset(p.value for p in Permission)


def parse_permission(text: str) -> Permission:
    try:
        return Permission(text)
    except ValueError:
        allowed = ", ".join(p.value for p in Permission)
        raise InvalidArgument(f"unknown permission {text!r}: use one of {allowed}") from None


class Scope(StrEnum):
    """Where a binding applies (and the kinds of resource a binding can name)."""

    CLUSTER = "cluster"
    NAMESPACE = "namespace"
    TOPIC = "topic"


class ResourceKind(StrEnum):
    CLUSTER = "cluster"
    NAMESPACE = "namespace"
    TOPIC = "topic"
    #: Named in denials; resolves to the cluster (bindings have no subject scope).
    SCHEMA_SUBJECT = "schema_subject"
    #: Named in denials; resolves to the cluster.
    BROKER = "broker"


@dataclass(frozen=True, slots=True)
class Resource:
    kind: ResourceKind
    #: "" for the cluster, the namespace name, ``/ns/topic``, the subject, the broker id.
    name: str = ""

    @classmethod
    def cluster(cls) -> Resource:
        return CLUSTER

    @classmethod
    def namespace(cls, name: str) -> Resource:
        return cls(ResourceKind.NAMESPACE, validate_namespace(name))

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls(ResourceKind.TOPIC, str(TopicName.parse(name)))

    @classmethod
    def schema_subject(cls, subject: str) -> Resource:
        return cls(ResourceKind.SCHEMA_SUBJECT, subject)

    @classmethod
    def broker(cls, broker_id: str) -> Resource:
        return cls(ResourceKind.BROKER, broker_id)

    def lineage(self) -> list[tuple[Scope, str]]:
        """The (scope, resource) steps a binding may match, narrowest first."""
        if self.kind is ResourceKind.TOPIC:
            topic = TopicName.parse(self.name)
            steps = [(Scope.TOPIC, str(topic))]
            if topic.base != topic:
                steps.append((Scope.TOPIC, str(topic.base)))
            return [*steps, (Scope.NAMESPACE, topic.namespace), (Scope.CLUSTER, "")]
        if self.kind is ResourceKind.NAMESPACE:
            return [(Scope.NAMESPACE, self.name), (Scope.CLUSTER, "")]
        return [(Scope.CLUSTER, "")]

    def __str__(self) -> str:
        return "the cluster" if self.kind is ResourceKind.CLUSTER else f"{self.kind.value} {self.name}"


CLUSTER = Resource(ResourceKind.CLUSTER, "")

#: Role and binding names are part of etcd keys.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


def validate_name(what: str, name: str) -> str:
    if not _NAME.match(name) or name in (".", ".."):
        raise InvalidArgument(f"invalid {what} name {name!r}: use 1-100 letters, digits, '_', '-' or '.'")
    return name


def validate_scope_resource(scope: str, resource: str) -> tuple[Scope, str]:
    """A binding's scope and resource, normalised; InvalidArgument saying what is allowed."""
    try:
        sc = Scope(scope)
    except ValueError:
        raise InvalidArgument(
            f"unknown scope {scope!r}: use cluster, namespace (with a namespace name) or topic (with /ns/topic)"
        ) from None
    if sc is Scope.CLUSTER:
        if resource:
            raise InvalidArgument(f"a cluster-scope binding names no resource (got {resource!r})")
        return sc, ""
    if sc is Scope.NAMESPACE:
        return sc, validate_namespace(resource)
    return sc, str(TopicName.parse(resource))


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    permissions: frozenset[Permission]
    description: str = ""
    #: Defined in code (cannot be stored, changed or deleted).
    builtin: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"permissions": sorted(p.value for p in self.permissions), "description": self.description}

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> Role:
        # A permission this version does not know (written by a newer one) grants nothing here.
        perms = frozenset(Permission(p) for p in d.get("permissions", ()) if p in _PERMISSION_VALUES)
        return cls(name, perms, str(d.get("description", "")))


@dataclass(frozen=True, slots=True)
class Binding:
    name: str
    #: ``type:name`` (see :mod:`danube_common.security.principal`).
    principal: str
    role: str
    scope: Scope
    #: "" at cluster scope; a namespace name; ``/ns/topic``.
    resource: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "role": self.role,
            "scope": self.scope.value,
            "resource": self.resource,
        }

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> Binding:
        return cls(name, str(d["principal"]), str(d["role"]), Scope(d["scope"]), str(d.get("resource", "")))

    @classmethod
    def create(cls, name: str, principal: str, role: str, scope: str, resource: str = "") -> Binding:
        """A validated binding (InvalidArgument naming what is wrong)."""
        kind, pname = parse_principal(principal)
        sc, res = validate_scope_resource(scope, resource)
        return cls(
            validate_name("binding", name), f"{kind.value}:{pname}", validate_name("role", role), sc, res
        )


CLUSTER_SERVICE_ROLE = "cluster-service"
BUILTIN_ROLES: dict[str, Role] = {
    r.name: r
    for r in (
        # Not cluster_internal: a person's token never campaigns for a control-plane role or
        # drives a WAL uploader (cluster members hold it through their certificates).
        Role(
            "admin",
            frozenset(Permission) - {Permission.CLUSTER_INTERNAL},
            "every permission but cluster_internal",
            builtin=True,
        ),
        Role(
            CLUSTER_SERVICE_ROLE,
            # produce: a broker publishes dead letters to the topic's owner over the client API.
            frozenset({Permission.CLUSTER_INTERNAL, Permission.LOOKUP, Permission.PRODUCE}),
            "what Danube services need of each other (held by mTLS cluster members)",
            builtin=True,
        ),
        Role(
            "producer", frozenset({Permission.LOOKUP, Permission.PRODUCE}), "find and publish", builtin=True
        ),
        Role(
            "consumer", frozenset({Permission.LOOKUP, Permission.CONSUME}), "find and consume", builtin=True
        ),
    )
}


class PolicySource(Protocol):
    """Where roles and bindings come from (the watch-fed :class:`SecurityView`, or a static set)."""

    def role(self, name: str) -> Role | None: ...

    def bindings_for(self, principal: str) -> Sequence[Binding]: ...


@dataclass(slots=True)
class StaticPolicy:
    """A fixed policy (tests, and servers configured without etcd)."""

    roles: Mapping[str, Role] = field(default_factory=dict)
    bindings: Sequence[Binding] = ()

    def role(self, name: str) -> Role | None:
        return BUILTIN_ROLES.get(name) or self.roles.get(name)

    def bindings_for(self, principal: str) -> Sequence[Binding]:
        return [b for b in self.bindings if b.principal == principal]


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    #: Why, for logs: "super admin", "role producer via binding b1 at namespace ns", ...
    reason: str


def decide(
    policy: PolicySource,
    principal: Principal,
    permission: Permission,
    resource: Resource,
    *,
    super_admins: frozenset[str] = frozenset(),
) -> Decision:
    """Allow or deny ``principal`` ``permission`` on ``resource`` (pure: no I/O)."""
    if str(principal) in super_admins or (principal.subject and principal.subject in super_admins):
        return Decision(True, "super admin")
    lineage = resource.lineage()
    if principal.is_cluster_member and permission in BUILTIN_ROLES[CLUSTER_SERVICE_ROLE].permissions:
        return Decision(True, f"cluster member (role {CLUSTER_SERVICE_ROLE})")
    bindings = policy.bindings_for(str(principal))
    for scope, name in lineage:
        for b in bindings:
            if b.scope is not scope or b.resource != name:
                continue
            role = policy.role(b.role)
            if role is not None and permission in role.permissions:
                where = "the cluster" if scope is Scope.CLUSTER else f"{scope.value} {name}"
                return Decision(True, f"role {role.name} via binding {b.name} at {where}")
    return Decision(False, f"no role bound to {principal} grants {permission.value} on {resource}")


class Authorizer:
    """RBAC checks against a policy source, with the configured super admins."""

    def __init__(self, policy: PolicySource, *, super_admins: Iterable[str] = ()) -> None:
        self.policy = policy
        self.super_admins = frozenset(super_admins)

    def check(self, principal: Principal, permission: Permission, resource: Resource) -> Decision:
        return decide(self.policy, principal, permission, resource, super_admins=self.super_admins)

    def require(self, principal: Principal, permission: Permission, resource: Resource) -> Decision:
        """The decision if allowed; PermissionDenied naming principal, permission and resource."""
        decision = self.check(principal, permission, resource)
        if not decision.allowed:
            raise PermissionDenied(
                f"{principal} may not {permission.value} on {resource}: no role bound to it at "
                f"{' or '.join(_where(s, n) for s, n in resource.lineage())} grants {permission.value} "
                f"(`danube-admin security bindings create ...` grants it)"
            )
        return decision


def _where(scope: Scope, name: str) -> str:
    return "the cluster" if scope is Scope.CLUSTER else f"{scope.value} {name}"
