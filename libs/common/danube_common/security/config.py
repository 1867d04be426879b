"""The authentication / authorization section of a service config (``auth:``).

Off by default (local development): every caller is anonymous and allowed. With ``enabled``,
every RPC needs an identity (a verified client certificate or a bearer JWT) and RBAC decides.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from danube_common.config import Frozen
from danube_common.security.tokens import ALGORITHMS, HMAC_ALGORITHMS, TokenVerifier


class JwtConfig(Frozen):
    #: Tokens must carry this ``iss``.
    issuer: str = "danube"
    #: HS256/384/512 (shared secret) or RS256/384/512, ES256/384/512 (public key).
    algorithm: str = "HS256"
    #: HS*: file holding the shared secret (at least 32 bytes; surrounding whitespace ignored).
    secret_file: str | None = None
    #: RS*/ES*: PEM file holding the public key tokens are checked with.
    public_key_file: str | None = None
    #: Clock skew allowed on ``exp`` / ``nbf``.
    leeway_s: float = 5.0
    #: A verified token is trusted this long (never beyond its exp) before it is checked again.
    cache_ttl_s: float = 30.0
    cache_max_entries: int = 10_000

    @model_validator(mode="after")
    def _key_for_algorithm(self) -> JwtConfig:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"auth.jwt.algorithm {self.algorithm!r}: use one of {', '.join(ALGORITHMS)}")
        if self.algorithm in HMAC_ALGORITHMS and not self.secret_file:
            raise ValueError(f"auth.jwt.algorithm {self.algorithm} needs auth.jwt.secret_file")
        if self.algorithm not in HMAC_ALGORITHMS and not self.public_key_file:
            raise ValueError(f"auth.jwt.algorithm {self.algorithm} needs auth.jwt.public_key_file")
        return self

    def verifier(self) -> TokenVerifier:
        """Read the key file and build the verifier (ConfigError naming the file)."""
        return TokenVerifier.from_files(
            issuer=self.issuer,
            algorithm=self.algorithm,
            secret_file=self.secret_file,
            public_key_file=self.public_key_file,
            leeway_s=self.leeway_s,
            cache_ttl_s=self.cache_ttl_s,
            cache_max_entries=self.cache_max_entries,
        )


class AuthConfig(Frozen):
    enabled: bool = False
    #: Bearer tokens; unset: this server takes no tokens (mTLS identities only).
    jwt: JwtConfig | None = None
    #: Subjects (a token's ``sub``) or principals (``user:alice``) that bypass RBAC.
    super_admins: list[str] = Field(default_factory=list)
    #: Certificate names (common name or SAN; shell patterns like ``*.danube.internal``) of the
    #: cluster's own services: a client certificate naming one is a trusted cluster member
    #: (principal ``broker_internal:{name}``, built-in role ``cluster-service``).
    internal_identities: list[str] = Field(default_factory=list)
    #: A verified client certificate that is not a cluster member identifies ``user:{common name}``
    #: (when no bearer token is sent). False: such callers must send a token.
    client_cert_users: bool = True
    #: Long streams re-check their authorization at most this often (a revoked binding or an
    #: expired token ends a running stream within about this time of the cache seeing it).
    stream_recheck_interval_s: float = 0.5
