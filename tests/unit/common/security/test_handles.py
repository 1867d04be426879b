"""Who may use a producer or consumer by id: its creator, a super admin, a manage_topic holder."""

from __future__ import annotations

import pytest

from danube_common.errors import PermissionDenied
from danube_common.security.handles import check_handle_use, creator_of
from danube_common.security.principal import AuthSource, Principal, PrincipalType
from danube_common.security.rbac import Authorizer, Binding, Permission, Resource, Role, Scope, StaticPolicy
from danube_common.security.rules import Handle, HandleInfo

pytestmark = pytest.mark.unit

TOPIC = "/orders/new"
ALICE = Principal(PrincipalType.USER, "alice", AuthSource.JWT, subject="alice-sub")
ALICE_BY_CERT = Principal(PrincipalType.USER, "alice", AuthSource.MTLS, subject="alice")
BOB = Principal(PrincipalType.USER, "bob", AuthSource.JWT, subject="bob-sub")
OPS = Principal(PrincipalType.USER, "ops", AuthSource.JWT, subject="ops-sub")
NS_OPS = Principal(PrincipalType.USER, "ns-ops", AuthSource.JWT, subject="ns-ops-sub")
ROOT = Principal(PrincipalType.USER, "root", AuthSource.JWT, subject="root")
MEMBER = Principal(PrincipalType.BROKER_INTERNAL, "broker-1", AuthSource.MTLS, subject="broker-1")
CLAIMED_MEMBER = Principal(PrincipalType.BROKER_INTERNAL, "broker-1", AuthSource.JWT, subject="broker-1")

AUTHORIZER = Authorizer(
    StaticPolicy(
        roles={"topic-admin": Role("topic-admin", frozenset({Permission.MANAGE_TOPIC}))},
        bindings=[
            Binding("b1", "user:bob", "producer", Scope.TOPIC, TOPIC),
            Binding("b2", "user:ops", "topic-admin", Scope.TOPIC, TOPIC),
            Binding("b3", "user:ns-ops", "topic-admin", Scope.NAMESPACE, "orders"),
            Binding("b4", "user:bob", "topic-admin", Scope.TOPIC, "/orders/other"),
        ],
    ),
    super_admins=["root"],
)
PRODUCER = Handle("producer", 7)


def info(creator: Principal | None) -> HandleInfo:
    return HandleInfo(Resource.topic(TOPIC), creator_of(creator) if creator is not None else None)


def test_creator_is_the_principal_and_a_certificate_member_is_told_apart() -> None:
    assert creator_of(ALICE) == creator_of(ALICE_BY_CERT) == "user:alice"
    assert creator_of(MEMBER) != creator_of(CLAIMED_MEMBER)
    assert creator_of(CLAIMED_MEMBER) == "broker_internal:broker-1"


@pytest.mark.parametrize(
    ("caller", "creator", "allowed"),
    [
        (ALICE, ALICE, True),  # the creator
        (ALICE_BY_CERT, ALICE, True),  # the same principal, authenticated another way
        (BOB, ALICE, False),  # produce on the topic is not enough
        (OPS, ALICE, True),  # manage_topic on the topic
        (NS_OPS, ALICE, True),  # manage_topic on its namespace
        (ROOT, ALICE, True),  # super admin
        (MEMBER, ALICE, False),  # cluster members hold no manage_topic
        (MEMBER, MEMBER, True),
        (CLAIMED_MEMBER, MEMBER, False),  # a token claiming the member's name is not the member
        (ALICE, None, False),  # no recorded creator: elevated principals only
        (OPS, None, True),
        (ROOT, None, True),
    ],
    ids=lambda v: str(v) if v is not None else "none",
)
def test_who_may_use_a_handle(caller: Principal, creator: Principal | None, allowed: bool) -> None:
    if allowed:
        check_handle_use(AUTHORIZER, caller, PRODUCER, info(creator))
        return
    with pytest.raises(PermissionDenied) as err:
        check_handle_use(AUTHORIZER, caller, PRODUCER, info(creator))
    assert f"{caller} may not use producer 7 on topic {TOPIC}" in err.value.message
    assert "create your own producer" in err.value.message


def test_a_name_taken_by_another_principal_says_to_choose_another() -> None:
    with pytest.raises(PermissionDenied) as err:
        check_handle_use(AUTHORIZER, BOB, Handle("consumer", 9), info(ALICE), by_name="c1")
    assert "user:bob may not take over consumer 9 ('c1')" in err.value.message
    assert "choose another consumer name" in err.value.message
