"""RBAC roles and bindings in etcd, every write a fenced transaction.

Keys (``danube_common.keys``): ``/{cluster}/auth/roles/{role}`` and
``/{cluster}/auth/bindings/{binding}``. Built-in roles (``rbac.BUILTIN_ROLES``) live in code:
they cannot be stored, changed or deleted, and bindings may name them.

Fencing: a binding is created only if absent and only while its role exists; for a stored role
the same transaction re-writes the role record, so its ``mod_revision`` moves. Deleting a role
compares that ``mod_revision`` after checking that no binding names it, so a binding created
concurrently makes the delete fail and re-check (no binding is ever left naming a deleted role by
a race; one that names a missing role grants nothing anyway: default deny).

Every write returns its store revision: a caller that must see its own write (or an admin tool
confirming a revocation) waits for it in a :class:`~danube_common.security.security_view.SecurityView`.
"""

from __future__ import annotations

from collections.abc import Iterable

from danube_common.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from danube_common.keys import Keys
from danube_common.metadata.store import Compare, MetadataStore, Op
from danube_common.security.rbac import (
    BUILTIN_ROLES,
    Binding,
    Permission,
    Role,
    parse_permission,
    validate_name,
)

_ATTEMPTS = 20


def _permissions(permissions: Iterable[Permission | str]) -> frozenset[Permission]:
    perms = frozenset(p if isinstance(p, Permission) else parse_permission(p) for p in permissions)
    if not perms:
        raise InvalidArgument("a role needs at least one permission")
    return perms


def _not_builtin(name: str) -> str:
    validate_name("role", name)
    if name in BUILTIN_ROLES:
        raise InvalidArgument(f"role {name!r} is built in and cannot be changed; pick another name")
    return name


class SecurityStore:
    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        self.store = store
        self.keys = keys

    # ------------------------------------------------------------------ roles
    async def create_role(
        self, name: str, permissions: Iterable[Permission | str], *, description: str = ""
    ) -> int:
        role = Role(_not_builtin(name), _permissions(permissions), description)
        key = self.keys.auth_role(name)
        res = await self.store.txn([Compare.absent(key)], [Op.put(key, role.to_json())])
        if not res.succeeded:
            raise AlreadyExists(f"role {name!r} already exists (delete it first, or use another name)")
        return res.revision

    async def update_role(
        self, name: str, permissions: Iterable[Permission | str], *, description: str | None = None
    ) -> int:
        """Replace a stored role's permissions (and description when given)."""
        perms = _permissions(permissions)
        key = self.keys.auth_role(_not_builtin(name))
        for _ in range(_ATTEMPTS):
            kv = await self.store.get(key)
            if kv is None:
                raise NotFound(f"role {name!r} does not exist")
            old = Role.from_json(name, kv.json())
            role = Role(name, perms, old.description if description is None else description)
            res = await self.store.txn(
                [Compare.mod_revision_is(key, kv.mod_revision)], [Op.put(key, role.to_json())]
            )
            if res.succeeded:
                return res.revision
        raise Unavailable(f"role {name!r} is being changed concurrently; retry")

    async def get_role(self, name: str) -> Role | None:
        """A stored or built-in role (None if neither)."""
        if name in BUILTIN_ROLES:
            return BUILTIN_ROLES[name]
        kv = await self.store.get(self.keys.auth_role(validate_name("role", name)))
        return Role.from_json(name, kv.json()) if kv else None

    async def list_roles(self) -> list[Role]:
        """Built-in roles, then stored ones, each by name."""
        kvs, _ = await self.store.get_prefix(self.keys.auth_roles_prefix())
        stored = []
        for kv in kvs:
            parsed = self.keys.parse_auth_key(kv.key)
            if parsed is not None and parsed[0] == "role":
                stored.append(Role.from_json(parsed[1], kv.json()))
        return [*sorted(BUILTIN_ROLES.values(), key=lambda r: r.name), *sorted(stored, key=lambda r: r.name)]

    async def delete_role(self, name: str) -> int:
        """Delete a stored role; refused while a binding names it."""
        key = self.keys.auth_role(_not_builtin(name))
        for _ in range(_ATTEMPTS):
            kv = await self.store.get(key)
            if kv is None:
                raise NotFound(f"role {name!r} does not exist")
            users = [b.name for b in await self.list_bindings() if b.role == name]
            if users:
                raise FailedPrecondition(
                    f"role {name!r} is still bound by {', '.join(users)}: delete those bindings first"
                )
            res = await self.store.txn([Compare.mod_revision_is(key, kv.mod_revision)], [Op.delete(key)])
            if res.succeeded:
                return res.revision
        raise Unavailable(f"role {name!r} is being changed concurrently; retry")

    # ------------------------------------------------------------------ bindings
    async def create_binding(self, binding: Binding) -> int:
        """Store a binding (build it with ``Binding.create`` to validate it)."""
        key = self.keys.auth_binding(validate_name("binding", binding.name))
        for _ in range(_ATTEMPTS):
            compares = [Compare.absent(key)]
            ops = [Op.put(key, binding.to_json())]
            if binding.role not in BUILTIN_ROLES:
                role_key = self.keys.auth_role(binding.role)
                role_kv = await self.store.get(role_key)
                if role_kv is None:
                    raise NotFound(
                        f"role {binding.role!r} does not exist: create it first "
                        f"(built-in roles: {', '.join(sorted(BUILTIN_ROLES))})"
                    )
                compares.append(Compare.mod_revision_is(role_key, role_kv.mod_revision))
                ops.append(
                    Op.put(role_key, role_kv.value)
                )  # moves the role's mod_revision: fences delete_role
            res = await self.store.txn(compares, ops, [Op.get(key)])
            if res.succeeded:
                return res.revision
            if res.gets and res.gets[0] is not None:
                raise AlreadyExists(
                    f"binding {binding.name!r} already exists (delete it first, or use another name)"
                )
        raise Unavailable(f"role {binding.role!r} is being changed concurrently; retry")

    async def get_binding(self, name: str) -> Binding | None:
        kv = await self.store.get(self.keys.auth_binding(validate_name("binding", name)))
        return Binding.from_json(name, kv.json()) if kv else None

    async def list_bindings(self, *, principal: str | None = None) -> list[Binding]:
        """Every binding by name (only ``principal``'s when given)."""
        kvs, _ = await self.store.get_prefix(self.keys.auth_bindings_prefix())
        out = []
        for kv in kvs:
            parsed = self.keys.parse_auth_key(kv.key)
            if parsed is None or parsed[0] != "binding":
                continue
            b = Binding.from_json(parsed[1], kv.json())
            if principal is None or b.principal == principal:
                out.append(b)
        return out

    async def delete_binding(self, name: str) -> int:
        """Revoke a binding; returns the revision of the delete (NotFound if absent)."""
        key = self.keys.auth_binding(validate_name("binding", name))
        res = await self.store.txn([Compare.exists(key)], [Op.delete(key)])
        if not res.succeeded:
            raise NotFound(f"binding {name!r} does not exist")
        return res.revision
