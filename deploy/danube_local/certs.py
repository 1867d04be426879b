"""``danube-local certs``: the security files of a secured deployment, written into one directory.

``danube-local up --secure`` makes its files for itself (:mod:`danube_local.secure_mode`); this
makes the same kind of files for services that run elsewhere: containers
(deploy/docker-compose.secure.yml runs it as a one-shot ``certs`` service writing into a named
volume that every service mounts read-only) or machines of your own. Into ``--dir`` it writes:

- ``ca.pem``/``ca.key``: the CA (:func:`~danube_local.secure.ensure_ca`);
- ``{identity}.pem``/``.key`` for every ``--service IDENTITY[=HOST,HOST...]``: the identity is
  the certificate's common name (what ``auth.internal_identities`` matches: ``broker-1``,
  ``leader-1``, ``lookup``, ...), the hosts its subject alternative names (the names the
  service is dialed at, e.g. its compose service name ``broker1``; default: the identity),
  always with ``localhost`` and ``127.0.0.1``; usable by a server and as a client (mTLS between
  services, and towards etcd);
- ``admin.pem``/``.key``: a client certificate for people and tools;
- ``jwt-secret``: the HS256 secret every server checks tokens with;
- ``admin.jwt``: a token of the super admin ``admin`` (``auth.super_admins``).

It is idempotent: what is still good is kept (the CA; a certificate issued by it that names
the same hosts and stays valid for 30 more days; the secret; a token that verifies with the
secret, names the super admin and has between half and all of ``--admin-token-ttl`` left), the
rest is made anew, so a second run changes nothing and a changed host list re-issues only that
certificate. Keys, the secret and the token are mode 0600, certificates 0644, the directory
0700; ``--owner`` gives them all to the user the services run as (the image's ``danube``), for a
run as root.
"""

from __future__ import annotations

import datetime as dt
import grp
import ipaddress
import os
import pwd
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from danube_common.errors import DanubeError
from danube_common.security import TokenVerifier, issue_token
from danube_local.secure import (
    ADMIN_IDENTITY,
    CA_CERT_FILE,
    CA_KEY_FILE,
    DEFAULT_HOSTS,
    JWT_SECRET_FILE,
    _write,
    ensure_ca,
    ensure_certificate,
    ensure_jwt_secret,
)
from danube_local.secure_mode import ADMIN_SUBJECT, ISSUER, TOKEN_TTL_S

__all__ = [
    "DeploymentFiles",
    "Outcome",
    "ServiceSpec",
    "owner_ids",
    "write_deployment_files",
]

#: Names a certificate identity may have (it is also a file name).
_IDENTITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
#: DNS names a certificate may name (labels of letters, digits, '-' and '_'; a leading ``*.``).
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_DNS_NAME = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$")
#: Identities that would overwrite another file of the directory.
_RESERVED = frozenset({"ca", ADMIN_IDENTITY})


def _is_host(text: str) -> bool:
    """A DNS name or an IP address (IPv4, IPv6)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return len(text) <= 253 and bool(_DNS_NAME.match(text))
    return True


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """One ``--service IDENTITY[=HOST,HOST...]``: a certificate's common name and its hosts."""

    identity: str
    hosts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> ServiceSpec:
        """``broker-1=broker1,10.0.0.5`` -> identity ``broker-1``, hosts (broker1, 10.0.0.5);
        ``lookup`` -> identity and host ``lookup``. ValueError saying what is allowed."""
        identity, sep, rest = text.partition("=")
        identity = identity.strip()
        if not _IDENTITY.match(identity):
            raise ValueError(
                f"service {text!r}: the identity {identity!r} must be 1-63 letters, digits, '.', '_' or "
                "'-' (it names the certificate and its files), e.g. broker-1=broker1"
            )
        if identity in _RESERVED:
            raise ValueError(
                f"service {text!r}: {identity!r} is reserved (ca.pem, admin.pem are made anyway)"
            )
        hosts = tuple(h.strip() for h in rest.split(",")) if sep else (identity,)
        bad = [h for h in hosts if not _is_host(h)]
        if bad:
            raise ValueError(
                f"service {text!r}: {bad[0]!r} is not a host name or address; write "
                "IDENTITY=HOST,HOST... with DNS names or IP addresses, e.g. broker-1=broker1,10.0.0.5"
            )
        return cls(identity, hosts)

    @property
    def cert_hosts(self) -> tuple[str, ...]:
        """Every name the certificate carries: the service's hosts, then localhost and 127.0.0.1."""
        return tuple(dict.fromkeys((*self.hosts, *DEFAULT_HOSTS)))


@dataclass(frozen=True, slots=True)
class DeploymentFiles:
    """Where everything goes in ``directory`` (pure: nothing is read or written here)."""

    directory: Path
    services: tuple[ServiceSpec, ...] = ()

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for spec in self.services:
            if spec.identity in seen:
                raise ValueError(f"service {spec.identity!r} is given twice: give each identity once")
            seen.add(spec.identity)

    @property
    def ca_cert(self) -> Path:
        return self.directory / CA_CERT_FILE

    @property
    def ca_key(self) -> Path:
        return self.directory / CA_KEY_FILE

    @property
    def jwt_secret(self) -> Path:
        return self.directory / JWT_SECRET_FILE

    @property
    def admin_token(self) -> Path:
        return self.directory / f"{ADMIN_SUBJECT}.jwt"

    def pair(self, identity: str) -> tuple[Path, Path]:
        """``{identity}.pem`` and ``{identity}.key``."""
        return self.directory / f"{identity}.pem", self.directory / f"{identity}.key"

    def paths(self) -> list[Path]:
        """Every file :func:`write_deployment_files` writes, in the order it writes them."""
        out = [self.ca_cert, self.ca_key, self.jwt_secret]
        for identity in [*(s.identity for s in self.services), ADMIN_IDENTITY]:
            out += self.pair(identity)
        return [*out, self.admin_token]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one file (or pair): kept as it was, or made anew; and what it is."""

    name: str
    made: bool
    what: str


def owner_ids(text: str) -> tuple[int, int]:
    """``USER[:GROUP]`` (names or numbers) -> (uid, gid); the group defaults to the user's
    primary group (or the uid, for a number unknown here). ValueError naming what is unknown."""
    user, _, group = text.partition(":")
    if user.isdigit():
        uid = int(user)
        try:
            primary = pwd.getpwuid(uid).pw_gid
        except KeyError:
            primary = uid
    else:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise ValueError(
                f"owner {text!r}: no user {user!r} here (give USER[:GROUP] or UID[:GID])"
            ) from None
        uid, primary = entry.pw_uid, entry.pw_gid
    if not group:
        return uid, primary
    if group.isdigit():
        return uid, int(group)
    try:
        return uid, grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"owner {text!r}: no group {group!r} here") from None


def _snapshot(paths: Sequence[Path]) -> tuple[bytes | None, ...]:
    return tuple(p.read_bytes() if p.exists() else None for p in paths)


def _until(cert_path: Path) -> str:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    return cert.not_valid_after_utc.strftime("%Y-%m-%d")


def _token_usable(path: Path, secret: str, ttl_s: float, now: float) -> float | None:
    """The expiry (unix s) of the token in ``path`` when it can be kept: it verifies with
    ``secret``, is the super admin's, and has between half and all of ``ttl_s`` left."""
    if not path.exists():
        return None
    verifier = TokenVerifier(key=secret, issuer=ISSUER, cache_ttl_s=0, clock=lambda: now)
    try:
        claims = verifier.verify(path.read_text().strip())
    except (DanubeError, OSError, UnicodeDecodeError):
        return None
    if claims.subject != ADMIN_SUBJECT or claims.principal_name != ADMIN_SUBJECT:
        return None
    left = claims.expires_at - now
    return claims.expires_at if ttl_s / 2 <= left <= ttl_s + 60 else None


def write_deployment_files(
    files: DeploymentFiles,
    *,
    admin_token_ttl_s: float = TOKEN_TTL_S,
    owner: tuple[int, int] | None = None,
    now: float | None = None,
) -> list[Outcome]:
    """Make (or keep) every file of :meth:`DeploymentFiles.paths`; returns what happened, file
    by file. OSError/ValueError on a directory it cannot use (e.g. ``owner`` without root)."""
    now = time.time() if now is None else now
    directory = files.directory
    outcomes: list[Outcome] = []

    before = _snapshot([files.ca_cert, files.ca_key])
    ca = ensure_ca(directory)
    made = _snapshot([files.ca_cert, files.ca_key]) != before
    outcomes.append(Outcome("ca.pem, ca.key", made, f"the CA, valid until {_until(files.ca_cert)}"))

    before = _snapshot([files.jwt_secret])
    ensure_jwt_secret(files.jwt_secret)
    outcomes.append(Outcome(JWT_SECRET_FILE, _snapshot([files.jwt_secret]) != before, "the HS256 secret"))

    pairs = [(s.identity, s.cert_hosts, True) for s in files.services]
    pairs.append((ADMIN_IDENTITY, DEFAULT_HOSTS, False))
    for identity, hosts, server in pairs:
        paths = files.pair(identity)
        before = _snapshot(paths)
        ensure_certificate(directory, ca, identity, hosts=hosts, server=server)
        what = (
            f"{identity}, for {', '.join(hosts)}" if server else "the client certificate for people and tools"
        )
        outcomes.append(
            Outcome(
                f"{identity}.pem, .key",
                _snapshot(paths) != before,
                f"{what}; valid until {_until(paths[0])}",
            )
        )

    secret = files.jwt_secret.read_text().strip()
    expires = _token_usable(files.admin_token, secret, admin_token_ttl_s, now)
    made = expires is None
    if made:
        token = issue_token(ADMIN_SUBJECT, "user", ADMIN_SUBJECT, admin_token_ttl_s, secret, ISSUER, now=now)
        _write(files.admin_token, token.encode(), 0o600)
        expires = now + admin_token_ttl_s
    assert expires is not None
    day = dt.datetime.fromtimestamp(expires, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    outcomes.append(
        Outcome(files.admin_token.name, made, f"super admin {ADMIN_SUBJECT!r}, valid until {day}")
    )

    # A volume's root may exist already with a looser mode (Docker makes mount points 0755).
    os.chmod(directory, 0o700)
    if owner is not None:
        uid, gid = owner
        for path in [directory, *files.paths()]:
            if (path.stat().st_uid, path.stat().st_gid) != (uid, gid):
                os.chown(path, uid, gid)
    return outcomes
