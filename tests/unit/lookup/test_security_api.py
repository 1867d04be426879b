"""The SecurityAdmin servicer over the in-memory store: round trips, and each refusal with its
error class (the interceptor maps it to the status) and a message saying what is allowed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from danube_common.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.security import SecurityStore, SecurityView
from danube_lookup.security_api import SecurityAdminApi

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]

CTX: Any = None  # the servicer never touches the context; errors are raised
KEYS = Keys("c1")


@pytest.fixture
async def parts() -> AsyncIterator[tuple[SecurityAdminApi, SecurityView]]:
    store = MemoryStore()
    view = SecurityView(store, KEYS)
    await view.start()
    yield SecurityAdminApi(SecurityStore(store, KEYS), view), view
    await view.aclose()
    await store.aclose()


@pytest.fixture
def api(parts: tuple[SecurityAdminApi, SecurityView]) -> SecurityAdminApi:
    return parts[0]


def binding(name: str, principal: str, role: str, scope: str, resource: str = "") -> apb.CreateBindingRequest:
    return apb.CreateBindingRequest(
        binding=apb.BindingInfo(name=name, principal=principal, role=role, scope=scope, resource=resource)
    )


async def test_roles_round_trip(api: SecurityAdminApi) -> None:
    listed = await api.ListRoles(apb.ListRolesRequest(), CTX)
    assert [r.name for r in listed.roles] == ["admin", "cluster-service", "consumer", "producer"]
    assert all(r.builtin for r in listed.roles)

    made = await api.CreateRole(
        apb.CreateRoleRequest(name="writer", permissions=["produce", "lookup", "produce"], description="w"),
        CTX,
    )
    assert (made.name, list(made.permissions), made.description, made.builtin) == (
        "writer",
        ["lookup", "produce"],
        "w",
        False,
    )
    assert await api.GetRole(apb.RoleRequest(name="writer"), CTX) == made
    assert (await api.GetRole(apb.RoleRequest(name="producer"), CTX)).builtin

    changed = await api.UpdateRole(apb.UpdateRoleRequest(name="writer", permissions=["consume"]), CTX)
    assert (list(changed.permissions), changed.description) == (["consume"], "w")  # description kept
    changed = await api.UpdateRole(
        apb.UpdateRoleRequest(name="writer", permissions=["consume"], description=""), CTX
    )
    assert changed.description == ""

    assert (await api.DeleteRole(apb.RoleRequest(name="writer"), CTX)).name == "writer"
    with pytest.raises(NotFound, match="role 'writer' does not exist"):
        await api.GetRole(apb.RoleRequest(name="writer"), CTX)


@pytest.mark.parametrize(
    ("call", "request_", "error", "message"),
    [
        (
            "CreateRole",
            apb.CreateRoleRequest(name="r", permissions=["produce", "publish"]),
            InvalidArgument,
            "unknown permission 'publish': use one of lookup, produce, consume",
        ),
        ("CreateRole", apb.CreateRoleRequest(name="r"), InvalidArgument, "at least one permission"),
        (
            "CreateRole",
            apb.CreateRoleRequest(name="admin", permissions=["lookup"]),
            InvalidArgument,
            "built in",
        ),
        ("CreateRole", apb.CreateRoleRequest(name="a b", permissions=["lookup"]), InvalidArgument, "letters"),
        (
            "UpdateRole",
            apb.UpdateRoleRequest(name="ghost", permissions=["lookup"]),
            NotFound,
            "does not exist",
        ),
        (
            "UpdateRole",
            apb.UpdateRoleRequest(name="producer", permissions=["lookup"]),
            InvalidArgument,
            "built in",
        ),
        ("DeleteRole", apb.RoleRequest(name="admin"), FailedPrecondition, "built in (defined in code)"),
        ("DeleteRole", apb.RoleRequest(name="ghost"), NotFound, "does not exist"),
        ("GetRole", apb.RoleRequest(name="ghost"), NotFound, "security roles list"),
        ("GetBinding", apb.BindingRequest(name="ghost"), NotFound, "security bindings list"),
        ("DeleteBinding", apb.BindingRequest(name="ghost"), NotFound, "does not exist"),
        (
            "CreateBinding",
            binding("b", "user:alice", "ghost", "cluster"),
            NotFound,
            "role 'ghost' does not exist: create it first (built-in roles: admin",
        ),
        ("CreateBinding", binding("b", "alice", "producer", "cluster"), InvalidArgument, "TYPE:NAME"),
        ("CreateBinding", binding("b", "user:alice", "producer", "galaxy"), InvalidArgument, "unknown scope"),
        (
            "CreateBinding",
            binding("b", "user:alice", "producer", "cluster", "ns"),
            InvalidArgument,
            "names no resource",
        ),
        (
            "CreateBinding",
            binding("b", "user:alice", "producer", "topic", "orders"),
            InvalidArgument,
            "/namespace/topic",
        ),
        ("ListBindings", apb.ListBindingsRequest(principal="alice"), InvalidArgument, "TYPE:NAME"),
    ],
)
async def test_refusals(api: SecurityAdminApi, call: str, request_: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        await getattr(api, call)(request_, CTX)


async def test_bindings_round_trip(parts: tuple[SecurityAdminApi, SecurityView]) -> None:
    api, view = parts
    await api.CreateRole(apb.CreateRoleRequest(name="writer", permissions=["produce"]), CTX)
    made = await api.CreateBinding(binding("alice-w", "user:alice", "writer", "namespace", "orders"), CTX)
    assert (made.principal, made.role, made.scope, made.resource) == (
        "user:alice",
        "writer",
        "namespace",
        "orders",
    )
    # The write returns once the view (the interceptor's cache) holds it.
    assert [b.name for b in view.bindings_for("user:alice")] == ["alice-w"]
    await api.CreateBinding(binding("bob-all", "user:bob", "admin", "cluster"), CTX)
    await api.CreateBinding(binding("alice-t", "user:alice", "consumer", "topic", "/orders/eu"), CTX)

    with pytest.raises(AlreadyExists, match="binding 'alice-w' already exists"):
        await api.CreateBinding(binding("alice-w", "user:carol", "producer", "cluster"), CTX)
    with pytest.raises(FailedPrecondition, match="still bound by alice-w"):
        await api.DeleteRole(apb.RoleRequest(name="writer"), CTX)

    every = await api.ListBindings(apb.ListBindingsRequest(), CTX)
    assert [b.name for b in every.bindings] == ["alice-t", "alice-w", "bob-all"]
    alices = await api.ListBindings(apb.ListBindingsRequest(principal="user:alice"), CTX)
    assert [b.name for b in alices.bindings] == ["alice-t", "alice-w"]
    assert await api.GetBinding(apb.BindingRequest(name="alice-w"), CTX) == made

    assert (await api.DeleteBinding(apb.BindingRequest(name="alice-w"), CTX)).name == "alice-w"
    assert [b.name for b in view.bindings_for("user:alice")] == ["alice-t"]
    await api.DeleteRole(apb.RoleRequest(name="writer"), CTX)  # no binding names it any more


async def test_without_a_view(api: SecurityAdminApi) -> None:
    """Auth disabled: no cache to wait for; the API still manages the store."""
    plain = SecurityAdminApi(api._store)
    made = await plain.CreateRole(apb.CreateRoleRequest(name="r", permissions=["lookup"]), CTX)
    assert made.name == "r"
