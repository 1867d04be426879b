"""The real `danube-admin security ...` console script against an in-process lookup on real etcd.

Without auth: roles and bindings round trips (table and JSON) and each refusal's message. With
TLS and auth (certificates and the JWT secret from ``danube_local.secure``, the services'
default issuer): tokens made by `security tokens create` with the cluster's secret are
accepted; a super admin's token creates a role and a binding; a token whose principal holds no
``manage_cluster`` is refused (PERMISSION_DENIED) until a binding grants it, and again once
that binding is deleted. Independent CLI runs go concurrently to keep each test short.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.security import JwtConfig, issue_token
from danube_common.service import ServiceReady
from danube_local.secure import SecureFiles, write_secure_files
from danube_lookup.app import running
from danube_lookup.config import LookupConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ADMIN = Path(sys.executable).parent / "danube-admin"
SUPER_ADMIN = "root"
#: The services' default issuer: what `tokens create` signs by default.
DEFAULT_ISSUER = JwtConfig.model_fields["issuer"].default


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


async def cli(*args: str, url: str) -> Result:
    """Run danube-admin without blocking the event loop that serves the in-process lookup."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DANUBE_ADMIN_URL", "DANUBE_TOKEN", "DANUBE_JWT_SECRET_KEY")
    }
    proc = await asyncio.create_subprocess_exec(
        str(ADMIN),
        "--admin-url",
        url,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def ok(r: Result) -> Result:
    assert r.code == 0, r.err
    return r


# ---------------------------------------------------------------------------- without auth


async def test_roles_and_bindings(lookup: ServiceReady) -> None:
    url = lookup.admin_url
    made, unknown_perm, builtin, ghost_role = await asyncio.gather(
        cli("security", "roles", "create", "pub", "--permissions", "lookup, produce", url=url),
        cli("security", "roles", "create", "bad", "--permissions", "produce,publish", url=url),
        cli("security", "roles", "delete", "admin", url=url),
        cli(
            "security",
            "bindings",
            "create",
            "b",
            "--principal",
            "user:alice",
            "--role",
            "ghost",
            "--scope",
            "cluster",
            url=url,
        ),
    )
    assert ok(made).out.strip() == "created role pub: lookup, produce"
    assert unknown_perm.code == 1
    assert "error: unknown permission 'publish': use one of lookup, produce, consume, manage_namespace" in (
        unknown_perm.err
    )
    assert (
        builtin.code == 1
        and "role 'admin' is built in (defined in code) and cannot be deleted" in builtin.err
    )
    assert ghost_role.code == 1 and "role 'ghost' does not exist: create it first" in ghost_role.err
    assert "hint: list roles with `danube-admin security roles list`" in ghost_role.err

    bound = await cli(
        "-o", "json", "security", "bindings", "create", "alice-pub", "--principal", "user:alice", "--role", "pub",
        "--scope", "namespace", "--resource", "/default",
        url=url,
    )  # fmt: skip
    assert ok(bound).json() == {
        "name": "alice-pub",
        "principal": "user:alice",
        "role": "pub",
        "scope": "namespace",
        "resource": "default",
    }

    listed, role, again, still_bound, roles = await asyncio.gather(
        cli("security", "bindings", "list", "--principal", "user:alice", "-o", "json", url=url),
        cli("security", "roles", "get", "pub", "-o", "json", url=url),
        cli("security", "roles", "create", "pub", "--permissions", "lookup", url=url),
        cli("security", "roles", "delete", "pub", url=url),
        cli("security", "roles", "list", url=url),
    )
    assert [b["name"] for b in ok(listed).json()] == ["alice-pub"]
    assert ok(role).json() == {
        "name": "pub",
        "permissions": ["lookup", "produce"],
        "description": "",
        "builtin": False,
    }
    assert again.code == 1 and "role 'pub' already exists" in again.err
    assert still_bound.code == 1 and "role 'pub' is still bound by alice-pub" in still_bound.err
    table = ok(roles).out.splitlines()
    assert table[0].split() == ["NAME", "PERMISSIONS", "BUILTIN", "DESCRIPTION"]
    assert [line.split()[0] for line in table[1:]] == [
        "admin",
        "cluster-service",
        "consumer",
        "producer",
        "pub",
    ]

    assert ok(await cli("security", "bindings", "delete", "alice-pub", url=url)).out.strip() == (
        "deleted binding alice-pub"
    )
    assert ok(await cli("security", "roles", "delete", "pub", url=url)).out.strip() == "deleted role pub"


# ---------------------------------------------------------------------------- with TLS and auth


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SecureFiles:
    return write_secure_files(tmp_path_factory.mktemp("secure"), ["lookup", "admin"])


@pytest.fixture
async def secure_lookup(
    files: SecureFiles, etcd_server: EtcdProcess, cluster_name: str
) -> AsyncIterator[ServiceReady]:
    cert, key = files.certs["lookup"]
    cfg = LookupConfig.model_validate(
        {
            "listen_addr": "127.0.0.1:0",
            "admin_listen_addr": "127.0.0.1:0",
            "etcd": {"endpoints": [etcd_server.endpoint], "cluster": cluster_name},
            "tls": {"cert_file": str(cert), "key_file": str(key), "ca_file": str(files.ca_cert)},
            # The default issuer (and HS256): what `tokens create` uses by default.
            "auth": {
                "enabled": True,
                "jwt": {"secret_file": str(files.jwt_secret)},
                "super_admins": [SUPER_ADMIN],
            },
        }
    )
    async with running(cfg) as info:
        yield info


async def test_with_tls_and_auth(files: SecureFiles, secure_lookup: ServiceReady, tmp_path: Path) -> None:
    url = f"https://127.0.0.1:{secure_lookup.admin_addr.rpartition(':')[2]}"
    assert files.jwt_secret is not None
    # The super admin's token is made by the CLI from the cluster's secret file; the others
    # in-process (the CLI's tokens are unit-tested against the services' verifier).
    made = await cli(
        "security", "tokens", "create", "--subject", SUPER_ADMIN, "--ttl", "10m",
        "--secret-file", str(files.jwt_secret), url=url,
    )  # fmt: skip
    root, bob, carol = (tmp_path / f"{who}.jwt" for who in ("root", "bob", "carol"))
    root.write_text(ok(made).out)  # with its newline, as `... > root.jwt` leaves it
    secret = files.jwt_secret.read_text().strip()
    for path, subject in ((bob, "bob"), (carol, "carol")):
        path.write_text(issue_token(subject, "user", subject, 600, secret, DEFAULT_ISSUER))

    def as_(who: Path, *args: str) -> Any:
        return cli(*args, "--tls-ca", str(files.ca_cert), "--token-file", str(who), url=url)

    # The super admin creates a role and binds it to carol.
    made = await as_(root, "security", "roles", "create", "ops", "--permissions", "manage_cluster,lookup")
    assert ok(made).out.strip() == "created role ops: lookup, manage_cluster"
    bound = await as_(
        root, "security", "bindings", "create", "carol-ops", "--principal", "user:carol", "--role", "ops",
        "--scope", "cluster",
    )  # fmt: skip
    assert ok(bound).out.strip() == "created binding carol-ops: user:carol holds role ops on the cluster"

    # bob holds nothing; carol's binding is in force at once (the write waited for the cache).
    denied, allowed = await asyncio.gather(
        as_(bob, "security", "roles", "list"),
        as_(carol, "-o", "json", "security", "bindings", "list"),
    )
    assert denied.code == 1 and "user:bob may not manage_cluster on the cluster" in denied.err, denied.err
    assert "hint: the security commands need manage_cluster" in denied.err
    assert [b["principal"] for b in ok(allowed).json()] == ["user:carol"]

    # Revoking the binding stops carol's next call.
    deleted = await as_(root, "security", "bindings", "delete", "carol-ops")
    assert ok(deleted).out.strip() == "deleted binding carol-ops"
    revoked = await as_(carol, "security", "roles", "list")
    assert revoked.code == 1 and "user:carol may not manage_cluster" in revoked.err
