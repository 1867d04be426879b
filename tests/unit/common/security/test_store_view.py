"""Roles and bindings in the (in-memory) metadata store, and the watch-fed view that checks read."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from danube_common.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.security.principal import AuthSource, Principal, PrincipalType
from danube_common.security.rbac import Authorizer, Binding, Permission, Resource
from danube_common.security.security_store import SecurityStore
from danube_common.security.security_view import SecurityView

pytestmark = pytest.mark.unit

KEYS = Keys("c1")
ALICE = Principal(PrincipalType.USER, "alice", AuthSource.JWT)


@pytest.fixture
async def parts() -> AsyncIterator[tuple[MemoryStore, SecurityStore, SecurityView]]:
    store = MemoryStore()
    view = SecurityView(store, KEYS)
    await view.start()
    yield store, SecurityStore(store, KEYS), view
    await view.aclose()
    await store.aclose()


async def test_roles_crud(parts: tuple[MemoryStore, SecurityStore, SecurityView]) -> None:
    store, sec, _ = parts
    await sec.create_role("writer", ["produce", Permission.LOOKUP], description="w")
    with pytest.raises(AlreadyExists):
        await sec.create_role("writer", ["produce"])
    with pytest.raises(InvalidArgument, match="built in"):
        await sec.create_role("admin", ["produce"])
    with pytest.raises(InvalidArgument, match="unknown permission"):
        await sec.create_role("x", ["fly"])
    with pytest.raises(InvalidArgument, match="at least one"):
        await sec.create_role("x", [])
    role = await sec.get_role("writer")
    assert role is not None and role.permissions == {Permission.PRODUCE, Permission.LOOKUP}
    await sec.update_role("writer", ["consume"])
    role = await sec.get_role("writer")
    assert role is not None and role.permissions == {Permission.CONSUME} and role.description == "w"
    names = [r.name for r in await sec.list_roles()]
    assert names[-1] == "writer" and "admin" in names
    assert (await store.get(KEYS.auth_role("writer"))) is not None
    await sec.delete_role("writer")
    assert await sec.get_role("writer") is None
    with pytest.raises(NotFound):
        await sec.delete_role("writer")


async def test_bindings_crud_and_role_fencing(parts: tuple[MemoryStore, SecurityStore, SecurityView]) -> None:
    _, sec, _ = parts
    with pytest.raises(NotFound, match="create it first"):
        await sec.create_binding(Binding.create("b1", "user:alice", "writer", "cluster"))
    await sec.create_role("writer", ["produce"])
    await sec.create_binding(Binding.create("b1", "user:alice", "writer", "namespace", "orders"))
    await sec.create_binding(Binding.create("b2", "user:bob", "consumer", "topic", "/orders/x"))  # built-in
    with pytest.raises(AlreadyExists):
        await sec.create_binding(Binding.create("b1", "user:carol", "writer", "cluster"))
    assert [b.name for b in await sec.list_bindings()] == ["b1", "b2"]
    assert [b.name for b in await sec.list_bindings(principal="user:bob")] == ["b2"]
    got = await sec.get_binding("b1")
    assert got is not None and got.resource == "orders"
    with pytest.raises(FailedPrecondition, match="b1"):
        await sec.delete_role("writer")
    await sec.delete_binding("b1")
    with pytest.raises(NotFound):
        await sec.delete_binding("b1")
    await sec.delete_role("writer")


async def test_binding_create_moves_the_role_revision(
    parts: tuple[MemoryStore, SecurityStore, SecurityView],
) -> None:
    """The fence that stops a role delete racing a new binding: binding moves the role's mod_revision."""
    store, sec, _ = parts
    await sec.create_role("writer", ["produce"])
    before = await store.get(KEYS.auth_role("writer"))
    await sec.create_binding(Binding.create("b1", "user:alice", "writer", "cluster"))
    after = await store.get(KEYS.auth_role("writer"))
    assert before is not None and after is not None and after.mod_revision > before.mod_revision
    assert after.value == before.value


async def test_view_follows_grants_and_revocations(
    parts: tuple[MemoryStore, SecurityStore, SecurityView],
) -> None:
    _, sec, view = parts
    authz = Authorizer(view)
    topic = Resource.topic("/orders/new")
    assert not authz.check(ALICE, Permission.PRODUCE, topic).allowed
    await sec.create_role("writer", ["produce"])
    rev = await sec.create_binding(Binding.create("b1", "user:alice", "writer", "namespace", "orders"))
    assert await view.wait_revision(rev, timeout_s=5)
    assert authz.check(ALICE, Permission.PRODUCE, topic).allowed
    rev = await sec.update_role("writer", ["consume"])
    assert await view.wait_revision(rev, timeout_s=5)
    assert not authz.check(ALICE, Permission.PRODUCE, topic).allowed
    assert authz.check(ALICE, Permission.CONSUME, topic).allowed
    rev = await sec.delete_binding("b1")  # revoke
    assert await view.wait_revision(rev, timeout_s=5)
    assert not authz.check(ALICE, Permission.CONSUME, topic).allowed
    assert view.bindings_for("user:alice") == ()


async def test_view_loads_existing_state_on_start() -> None:
    store = MemoryStore()
    sec = SecurityStore(store, KEYS)
    await sec.create_role("writer", ["produce"])
    await sec.create_binding(Binding.create("b1", "user:alice", "writer", "cluster"))
    await store.put(KEYS.auth_prefix() + "unknown/x", b"{}")  # ignored
    view = SecurityView(store, KEYS)
    await view.start()
    try:
        assert view.role("writer") is not None and view.role("admin") is not None
        assert [b.name for b in view.bindings_for("user:alice")] == ["b1"]
    finally:
        await view.aclose()
        await store.aclose()


def test_auth_keys() -> None:
    assert KEYS.auth_role("r") == "/c1/auth/roles/r"
    assert KEYS.auth_binding("b") == "/c1/auth/bindings/b"
    assert KEYS.parse_auth_key("/c1/auth/roles/r") == ("role", "r")
    assert KEYS.parse_auth_key("/c1/auth/bindings/b") == ("binding", "b")
    assert KEYS.parse_auth_key("/c1/auth/bindings/") is None
    assert KEYS.parse_auth_key("/c1/auth/other/x") is None
