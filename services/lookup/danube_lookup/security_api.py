"""The security admin API (``danube.admin.v1.SecurityAdmin``): protobuf <-> the RBAC store.

Roles and role bindings live in etcd (:class:`~danube_common.security.SecurityStore`, every write
a fenced transaction); this servicer validates the request, calls the store and translates the
records. Errors are DanubeErrors from the catalogue (an unknown permission or scope:
``INVALID_ARGUMENT`` naming what is allowed; an existing name: ``ALREADY_EXISTS``; a missing
role or binding: ``NOT_FOUND``; a built-in role or a role still bound: ``FAILED_PRECONDITION``),
mapped to status codes by the server's interceptor. Every RPC needs ``manage_cluster`` on the
cluster (``danube_common.security.rules``).

With auth enabled, a write returns once this lookup's RBAC cache (the interceptor's
:class:`~danube_common.security.SecurityView`) has applied it, so the next call to this lookup
is already decided by the new policy; other services follow within their watch latency. Every
change is logged at INFO with the principal that made it (an audit trail in the log).
"""

from __future__ import annotations

import logging

import grpc.aio

from danube_common.errors import FailedPrecondition, NotFound
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.security import BUILTIN_ROLES, Binding, Role, SecurityStore, SecurityView
from danube_common.security.interceptor import current_principal
from danube_common.security.principal import parse_principal
from danube_common.security.rbac import parse_permission, validate_name

log = logging.getLogger(__name__)


def role_info(role: Role) -> apb.RoleInfo:
    return apb.RoleInfo(
        name=role.name,
        permissions=sorted(p.value for p in role.permissions),
        description=role.description,
        builtin=role.builtin,
    )


def binding_info(b: Binding) -> apb.BindingInfo:
    return apb.BindingInfo(
        name=b.name, principal=b.principal, role=b.role, scope=b.scope.value, resource=b.resource
    )


def _caller() -> str:
    principal = current_principal()
    return str(principal) if principal is not None else "anonymous (auth disabled)"


class SecurityAdminApi(apb_grpc.SecurityAdminServicer):
    def __init__(self, store: SecurityStore, view: SecurityView | None = None) -> None:
        self._store = store
        #: The interceptor's RBAC cache (None with auth disabled: nothing to wait for).
        self._view = view

    async def _seen(self, revision: int) -> None:
        if self._view is not None and not await self._view.wait_revision(revision):
            log.warning("the RBAC cache has not applied revision %d yet; it follows the watch", revision)

    async def _role(self, name: str) -> Role:
        role = await self._store.get_role(name)
        if role is None:
            raise NotFound(f"role {name!r} does not exist (`danube-admin security roles list` lists them)")
        return role

    # ------------------------------------------------------------------ roles
    async def ListRoles(
        self, request: apb.ListRolesRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListRolesResponse:
        return apb.ListRolesResponse(roles=[role_info(r) for r in await self._store.list_roles()])

    async def GetRole(self, request: apb.RoleRequest, context: grpc.aio.ServicerContext) -> apb.RoleInfo:
        return role_info(await self._role(request.name))

    async def CreateRole(
        self, request: apb.CreateRoleRequest, context: grpc.aio.ServicerContext
    ) -> apb.RoleInfo:
        rev = await self._store.create_role(
            request.name, list(request.permissions), description=request.description
        )
        await self._seen(rev)
        perms = frozenset(parse_permission(p) for p in request.permissions)  # validated by the store
        role = Role(request.name, perms, request.description)
        log.info(
            "role %s created with %s by %s",
            role.name,
            ",".join(sorted(role.permissions)),
            _caller(),
        )
        return role_info(role)

    async def UpdateRole(
        self, request: apb.UpdateRoleRequest, context: grpc.aio.ServicerContext
    ) -> apb.RoleInfo:
        description = request.description if request.HasField("description") else None
        rev = await self._store.update_role(request.name, list(request.permissions), description=description)
        await self._seen(rev)
        role = await self._role(request.name)
        log.info(
            "role %s now has %s (changed by %s)",
            role.name,
            ",".join(sorted(role.permissions)),
            _caller(),
        )
        return role_info(role)

    async def DeleteRole(
        self, request: apb.RoleRequest, context: grpc.aio.ServicerContext
    ) -> apb.DeleteRoleResponse:
        name = validate_name("role", request.name)
        if name in BUILTIN_ROLES:
            raise FailedPrecondition(
                f"role {name!r} is built in (defined in code) and cannot be deleted; "
                f"built-in roles: {', '.join(sorted(BUILTIN_ROLES))}"
            )
        await self._seen(await self._store.delete_role(name))
        log.info("role %s deleted by %s", name, _caller())
        return apb.DeleteRoleResponse(name=name)

    # ------------------------------------------------------------------ bindings
    async def ListBindings(
        self, request: apb.ListBindingsRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListBindingsResponse:
        principal = None
        if request.principal:
            kind, name = parse_principal(request.principal)
            principal = f"{kind.value}:{name}"
        bindings = await self._store.list_bindings(principal=principal)
        return apb.ListBindingsResponse(bindings=[binding_info(b) for b in bindings])

    async def GetBinding(
        self, request: apb.BindingRequest, context: grpc.aio.ServicerContext
    ) -> apb.BindingInfo:
        binding = await self._store.get_binding(request.name)
        if binding is None:
            raise NotFound(
                f"binding {request.name!r} does not exist (`danube-admin security bindings list` lists them)"
            )
        return binding_info(binding)

    async def CreateBinding(
        self, request: apb.CreateBindingRequest, context: grpc.aio.ServicerContext
    ) -> apb.BindingInfo:
        b = request.binding
        binding = Binding.create(b.name, b.principal, b.role, b.scope, b.resource)
        await self._seen(await self._store.create_binding(binding))
        where = "the cluster" if not binding.resource else f"{binding.scope.value} {binding.resource}"
        log.info(
            "binding %s created: %s holds role %s on %s (by %s)",
            binding.name,
            binding.principal,
            binding.role,
            where,
            _caller(),
        )
        return binding_info(binding)

    async def DeleteBinding(
        self, request: apb.BindingRequest, context: grpc.aio.ServicerContext
    ) -> apb.DeleteBindingResponse:
        old = await self._store.get_binding(request.name)
        await self._seen(await self._store.delete_binding(request.name))
        log.info(
            "binding %s deleted (%s) by %s",
            request.name,
            f"{old.principal} role {old.role}" if old is not None else "already changed",
            _caller(),
        )
        return apb.DeleteBindingResponse(name=request.name)
