"""RBAC decisions: resolution topic -> namespace -> cluster, super admins, default deny."""

from __future__ import annotations

import pytest

from danube_common.errors import InvalidArgument, InvalidTopicName, PermissionDenied
from danube_common.security.principal import AuthSource, Principal, PrincipalType, parse_principal
from danube_common.security.rbac import (
    Authorizer,
    Binding,
    Permission,
    Resource,
    Role,
    Scope,
    StaticPolicy,
    validate_scope_resource,
)

pytestmark = pytest.mark.unit

P = Permission
ALICE = Principal(PrincipalType.USER, "alice", AuthSource.JWT, subject="alice-sub")
BOB = Principal(PrincipalType.USER, "bob", AuthSource.JWT, subject="bob-sub")
ROOT = Principal(PrincipalType.USER, "root", AuthSource.JWT, subject="root-sub")
MEMBER = Principal(PrincipalType.BROKER_INTERNAL, "broker-1", AuthSource.MTLS, subject="broker-1")
CLAIMED_MEMBER = Principal(PrincipalType.BROKER_INTERNAL, "broker-1", AuthSource.JWT, subject="broker-1")

POLICY = StaticPolicy(
    roles={
        "writer": Role("writer", frozenset({P.PRODUCE, P.LOOKUP})),
        "reader": Role("reader", frozenset({P.CONSUME})),
        "ns-admin": Role("ns-admin", frozenset({P.MANAGE_TOPIC, P.MANAGE_NAMESPACE})),
    },
    bindings=[
        Binding("b1", "user:alice", "writer", Scope.TOPIC, "/orders/new"),
        Binding("b2", "user:alice", "reader", Scope.NAMESPACE, "orders"),
        Binding("b3", "user:alice", "ns-admin", Scope.NAMESPACE, "sandbox"),
        Binding("b4", "user:alice", "consumer", Scope.TOPIC, "/logs/app"),  # a built-in role
        Binding("b5", "user:bob", "missing-role", Scope.CLUSTER, ""),  # names no role: grants nothing
        Binding("b6", "user:bob", "reader", Scope.CLUSTER, ""),
        Binding("b7", "user:alice", "writer", Scope.TOPIC, "/parts/p"),  # a partitioned topic
    ],
)
AUTHZ = Authorizer(POLICY, super_admins=["root-sub"])

CASES = [
    # principal, permission, resource, allowed
    (ALICE, P.PRODUCE, Resource.topic("/orders/new"), True),  # topic scope
    (ALICE, P.PRODUCE, Resource.topic("/orders/other"), False),  # another topic of the namespace
    (ALICE, P.CONSUME, Resource.topic("/orders/other"), True),  # namespace scope covers topics
    (ALICE, P.CONSUME, Resource.topic("/billing/x"), False),
    (ALICE, P.MANAGE_TOPIC, Resource.topic("/sandbox/t"), True),
    (ALICE, P.MANAGE_NAMESPACE, Resource.namespace("sandbox"), True),
    (ALICE, P.MANAGE_NAMESPACE, Resource.namespace("orders"), False),
    (ALICE, P.MANAGE_NAMESPACE, Resource.cluster(), False),  # a namespace grant is not cluster-wide
    (ALICE, P.CONSUME, Resource.topic("/logs/app"), True),  # built-in role
    (ALICE, P.PRODUCE, Resource.topic("/logs/app"), False),
    (ALICE, P.PRODUCE, Resource.topic("/parts/p-part-3"), True),  # partition -> partitioned topic
    (ALICE, P.PRODUCE, Resource.topic("/parts/q-part-3"), False),
    (BOB, P.CONSUME, Resource.topic("/any/thing"), True),  # cluster scope covers everything
    (BOB, P.CONSUME, Resource.namespace("any"), True),
    (BOB, P.PRODUCE, Resource.topic("/any/thing"), False),  # default deny (missing role grants nothing)
    (ROOT, P.MANAGE_CLUSTER, Resource.cluster(), True),  # super admin by subject
    (ROOT, P.CLUSTER_INTERNAL, Resource.cluster(), True),
    (MEMBER, P.CLUSTER_INTERNAL, Resource.cluster(), True),  # mTLS cluster member
    (MEMBER, P.PRODUCE, Resource.topic("/a/b"), True),
    (MEMBER, P.MANAGE_CLUSTER, Resource.cluster(), False),
    (CLAIMED_MEMBER, P.CLUSTER_INTERNAL, Resource.cluster(), False),  # a token cannot claim membership
    (Principal(PrincipalType.USER, "nobody", AuthSource.JWT), P.LOOKUP, Resource.cluster(), False),
]


@pytest.mark.parametrize(("principal", "permission", "resource", "allowed"), CASES)
def test_resolution_table(
    principal: Principal, permission: Permission, resource: Resource, allowed: bool
) -> None:
    assert AUTHZ.check(principal, permission, resource).allowed is allowed


def test_super_admin_by_principal_string() -> None:
    authz = Authorizer(StaticPolicy(), super_admins=["user:alice"])
    assert authz.check(ALICE, P.MANAGE_CLUSTER, Resource.cluster()).reason == "super admin"


def test_denial_names_principal_permission_and_resource() -> None:
    with pytest.raises(PermissionDenied) as info:
        AUTHZ.require(ALICE, P.PRODUCE, Resource.topic("/orders/other"))
    msg = info.value.message
    assert "user:alice" in msg and "produce" in msg and "/orders/other" in msg
    assert "namespace orders" in msg and "the cluster" in msg


def test_allow_reason_names_the_binding() -> None:
    d = AUTHZ.check(ALICE, P.CONSUME, Resource.topic("/orders/x"))
    assert d.reason == "role reader via binding b2 at namespace orders"


def test_binding_validation() -> None:
    b = Binding.create("b", "user:alice", "writer", "topic", "/ns/t")
    assert (b.principal, b.scope, b.resource) == ("user:alice", Scope.TOPIC, "/ns/t")
    with pytest.raises(InvalidArgument, match="TYPE:NAME"):
        Binding.create("b", "alice", "writer", "cluster")
    with pytest.raises(InvalidArgument, match="unknown scope"):
        validate_scope_resource("galaxy", "")
    with pytest.raises(InvalidArgument, match="names no resource"):
        validate_scope_resource("cluster", "x")
    with pytest.raises(InvalidTopicName):
        validate_scope_resource("topic", "not-a-topic")
    with pytest.raises(InvalidArgument, match="invalid binding name"):
        Binding.create("a/b", "user:alice", "writer", "cluster")
    assert parse_principal("service_account:ci") == (PrincipalType.SERVICE_ACCOUNT, "ci")


def test_role_json_round_trip_ignores_unknown_permissions() -> None:
    role = Role("r", frozenset({P.PRODUCE, P.LOOKUP}), "d")
    assert Role.from_json("r", role.to_json()) == role
    assert Role.from_json("r", {"permissions": ["produce", "fly"]}).permissions == {P.PRODUCE}


def test_the_admin_role_is_everything_but_cluster_internal() -> None:
    authz = Authorizer(StaticPolicy(bindings=[Binding("ops", "user:bob", "admin", Scope.CLUSTER, "")]))
    for permission in Permission:
        allowed = authz.check(BOB, permission, Resource.cluster()).allowed
        assert allowed == (permission is not P.CLUSTER_INTERNAL), permission
    assert authz.check(MEMBER, P.CLUSTER_INTERNAL, Resource.cluster()).allowed
