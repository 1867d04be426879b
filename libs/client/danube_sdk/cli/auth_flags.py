"""The security flags shared by ``danube-cli`` and ``danube-admin``: a token and TLS files.

Where the token comes from, first match wins: ``--token``, ``--token-file``, the environment
variable ``DANUBE_TOKEN`` (read when the parser is built). ``--token`` and ``--token-file``
together are a usage error. Prefer ``--token-file`` or ``DANUBE_TOKEN``: a ``--token`` value
is visible to other users in the process list.

Any of ``--tls-ca``, ``--tls-cert``, ``--tls-key`` makes every connection TLS; ``--tls-cert``
and ``--tls-key`` (a client certificate, for mTLS) go together. A token without TLS flags
needs an ``https://`` URL (checked against the default roots): a token is never sent over a
plaintext connection.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from danube_common.errors import ConfigError
from danube_sdk.auth import TlsOptions, check_token

ENV_TOKEN = "DANUBE_TOKEN"

SECURITY_EPILOG = f"""\
security (a cluster with TLS and tokens):
  export {ENV_TOKEN}=$(cat admin.jwt)          # or --token-file admin.jwt
  --tls-ca ca.pem                               # trust the cluster's CA
  --tls-ca ca.pem --tls-cert admin.pem --tls-key admin.key   # mTLS with a client certificate
token precedence: --token, then --token-file, then ${ENV_TOKEN}.
"""


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """What the flags resolved to: keyword arguments of DanubeClient and friends."""

    tls: TlsOptions | None = None
    token: str | None = None


def add_auth_arguments(
    parser: argparse.ArgumentParser, *, env: dict[str, str] | None, suppress: bool = False
) -> None:
    """Add the flags to ``parser``. ``env``: where ``DANUBE_TOKEN`` is read (None: not read, for
    the copies of the flags on subcommands); ``suppress``: add no defaults (so a subcommand's
    copy does not override a value given before the command)."""
    default = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("security")
    group.add_argument(
        "--token",
        metavar="JWT",
        default=default,
        help=f"bearer token sent on every call (visible in `ps`; prefer --token-file or ${ENV_TOKEN})",
    )
    group.add_argument(
        "--token-file", metavar="PATH", default=default, help="read the token from this file (one line)"
    )
    group.add_argument(
        "--tls-ca",
        metavar="PEM",
        default=default,
        help="CA certificate(s) that signed the servers' certificates",
    )
    group.add_argument(
        "--tls-cert", metavar="PEM", default=default, help="client certificate for mTLS (with --tls-key)"
    )
    group.add_argument(
        "--tls-key", metavar="PEM", default=default, help="client private key (with --tls-cert)"
    )
    if env is not None:
        parser.set_defaults(env_token=env.get(ENV_TOKEN) or None)


def resolve_auth(args: argparse.Namespace) -> ClientAuth:
    """The TLS options and token the flags (and ``DANUBE_TOKEN``) ask for.

    Raises ConfigError with what to change: both --token and --token-file, an unreadable or
    empty token file, --tls-cert without --tls-key (or the reverse).
    """
    token_flag: str | None = getattr(args, "token", None)
    token_file: str | None = getattr(args, "token_file", None)
    if token_flag is not None and token_file is not None:
        raise ConfigError("give --token or --token-file, not both")
    token: str | None
    if token_flag is not None:
        token = check_token(token_flag.strip(), source="--token value")
    elif token_file is not None:
        token = check_token(_read_token_file(token_file), source=f"token in {token_file}")
    elif getattr(args, "env_token", None):
        token = check_token(str(args.env_token).strip(), source=f"${ENV_TOKEN}")
    else:
        token = None
    ca, cert, key = (getattr(args, name, None) for name in ("tls_ca", "tls_cert", "tls_key"))
    if (cert is None) != (key is None):
        raise ConfigError("--tls-cert and --tls-key go together (a client certificate and its key)")
    tls = TlsOptions(ca_file=ca, cert_file=cert, key_file=key) if (ca or cert or key) else None
    return ClientAuth(tls=tls, token=token)


def _read_token_file(path: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read --token-file {path}: {reason}") from exc
    return text.strip()
