"""JWT bearer tokens: minting them, and verifying them once with a short cache.

Tokens follow Danube's format: claims ``iss``, ``exp``, ``sub``, ``principal_type`` (``user``,
``service_account`` or ``broker_internal``) and ``principal_name``; signed with a shared HMAC
secret (HS256/384/512) or a private key whose public half the servers hold (RS256/384/512,
ES256/384/512). A verifier accepts exactly one algorithm, its configured one (a token can never
choose how it is checked).

A verified token is cached for ``cache_ttl_s`` (30 s as in Danube), never beyond its ``exp``, in
a bounded LRU: a flood of distinct tokens costs verification time, not memory.

Every refusal is :class:`~danube_common.errors.Unauthenticated` with a stable ``reason``
(:class:`AuthFailure`) and a message saying what to do; an expired token is
:class:`~danube_common.errors.TokenExpired`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization

from danube_common.errors import ConfigError, TokenExpired, Unauthenticated
from danube_common.security.principal import PrincipalType

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
KEY_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
ALGORITHMS = HMAC_ALGORITHMS + KEY_ALGORITHMS
#: Shorter HMAC secrets are refused (RFC 7518 §3.2: at least the hash size; 32 bytes for HS256).
MIN_SECRET_BYTES = 32
REQUIRED_CLAIMS = ("iss", "exp", "sub", "principal_type", "principal_name")
BEARER_PREFIX = "bearer "
_HOW_TO_GET = "get a token with `danube-admin security tokens create --subject ... --ttl ...`"


class AuthFailure(StrEnum):
    """Why authentication failed: the ``reason`` of Unauthenticated (stable words)."""

    MISSING = "missing"
    MALFORMED = "malformed"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    BAD_SIGNATURE = "bad_signature"
    WRONG_ISSUER = "wrong_issuer"
    MISSING_CLAIM = "missing_claim"
    INVALID_CLAIM = "invalid_claim"
    #: A token was sent to a server that takes no tokens (no JWT key configured).
    TOKENS_NOT_ACCEPTED = "tokens_not_accepted"
    #: A certificate was presented but names no identity this server accepts.
    UNTRUSTED_CERTIFICATE = "untrusted_certificate"


def unauthenticated(reason: AuthFailure, detail: str) -> Unauthenticated:
    cls = TokenExpired if reason is AuthFailure.EXPIRED else Unauthenticated
    return cls(f"authentication failed ({reason.value}): {detail}", reason=reason.value)


@dataclass(frozen=True, slots=True)
class TokenClaims:
    subject: str
    principal_type: PrincipalType
    principal_name: str
    issuer: str
    #: Unix time (s).
    expires_at: float


def parse_bearer(value: str) -> str:
    """The token of an ``authorization`` metadata value (``Bearer <jwt>``, any case of the scheme)."""
    if value[: len(BEARER_PREFIX)].lower() != BEARER_PREFIX or not value[len(BEARER_PREFIX) :].strip():
        raise unauthenticated(
            AuthFailure.MALFORMED, "the authorization header must be `Bearer <jwt>`; " + _HOW_TO_GET
        )
    return value[len(BEARER_PREFIX) :].strip()


def _check_algorithm(algorithm: str) -> str:
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unsupported JWT algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}")
    return algorithm


def _check_secret(key: str | bytes) -> bytes:
    secret = key.encode() if isinstance(key, str) else key
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"the JWT HMAC secret is {len(secret)} bytes; use at least {MIN_SECRET_BYTES} random bytes "
            "(e.g. `openssl rand -hex 32`)"
        )
    return secret


def issue_token(
    subject: str,
    principal_type: PrincipalType | str,
    principal_name: str,
    ttl_s: float,
    key: str | bytes,
    issuer: str,
    algorithm: str = "HS256",
    *,
    now: float | None = None,
) -> str:
    """A signed token. ``key`` is the HMAC secret (HS*) or the PEM private key (RS*/ES*)."""
    _check_algorithm(algorithm)
    ptype = PrincipalType(principal_type)
    if ttl_s <= 0:
        raise ConfigError(f"a token's ttl must be positive (got {ttl_s} s)")
    issued = time.time() if now is None else now
    claims: dict[str, Any] = {
        "iss": issuer,
        "sub": subject,
        "iat": int(issued),
        "exp": int(issued + ttl_s),
        "principal_type": ptype.value,
        "principal_name": principal_name,
    }
    signing_key: Any = _check_secret(key) if algorithm in HMAC_ALGORITHMS else _load_private_key(key)
    return jwt.encode(claims, signing_key, algorithm=algorithm)


def _load_private_key(pem: str | bytes) -> Any:
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"the JWT signing key is not an unencrypted PEM private key: {exc}") from exc


def _load_public_key(pem: str | bytes, algorithm: str) -> Any:
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"the JWT verification key for {algorithm} is not a PEM public key "
            f"(`openssl pkey -in private.pem -pubout` extracts one): {exc}"
        ) from exc
    return key


class TokenVerifier:
    """Verifies bearer tokens for one issuer and one algorithm; caches what it verified."""

    def __init__(
        self,
        *,
        key: str | bytes,
        issuer: str,
        algorithm: str = "HS256",
        leeway_s: float = 0.0,
        cache_ttl_s: float = 30.0,
        cache_max_entries: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.algorithm = _check_algorithm(algorithm)
        self.issuer = issuer
        self._key: Any = (
            _check_secret(key) if algorithm in HMAC_ALGORITHMS else _load_public_key(key, algorithm)
        )
        self.leeway_s = leeway_s
        self.cache_ttl_s = cache_ttl_s
        self.cache_max_entries = max(0, cache_max_entries)
        self._clock = clock
        #: token -> (claims, cached until, unix s); LRU order.
        self._cache: OrderedDict[str, tuple[TokenClaims, float]] = OrderedDict()
        self.verifications = 0  # full signature checks done (for tests and stats)

    @classmethod
    def from_files(
        cls,
        *,
        issuer: str,
        algorithm: str,
        secret_file: str | None = None,
        public_key_file: str | None = None,
        **kwargs: Any,
    ) -> TokenVerifier:
        """Read the HMAC secret or the public key from a file (ConfigError naming the file)."""
        _check_algorithm(algorithm)
        wanted, path = (
            ("secret_file", secret_file)
            if algorithm in HMAC_ALGORITHMS
            else ("public_key_file", public_key_file)
        )
        if not path:
            raise ConfigError(f"JWT algorithm {algorithm} needs jwt.{wanted} (the file holding the key)")
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read jwt.{wanted} {path!r}: {exc.strerror or exc}") from exc
        key = data.strip() if algorithm in HMAC_ALGORITHMS else data
        return cls(key=key, issuer=issuer, algorithm=algorithm, **kwargs)

    def cache_size(self) -> int:
        return len(self._cache)

    def verify(self, token: str) -> TokenClaims:
        """The token's claims, or Unauthenticated with the reason."""
        now = self._clock()
        hit = self._cache.get(token)
        if hit is not None:
            claims, until = hit
            if now < until and now < claims.expires_at + self.leeway_s:
                self._cache.move_to_end(token)
                return claims
            del self._cache[token]
        claims = self._verify(token, now)
        if self.cache_max_entries and self.cache_ttl_s > 0:
            self._cache[token] = (claims, min(now + self.cache_ttl_s, claims.expires_at + self.leeway_s))
            while len(self._cache) > self.cache_max_entries:
                self._cache.popitem(last=False)
        return claims

    def _verify(self, token: str, now: float) -> TokenClaims:
        self.verifications += 1
        try:
            # Time claims are checked below against our clock (injectable, and one leeway rule).
            payload = jwt.decode(
                token,
                self._key,
                algorithms=[self.algorithm],
                issuer=self.issuer,
                options={
                    "require": ["iss", "exp", "sub"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.InvalidSignatureError as exc:
            raise unauthenticated(
                AuthFailure.BAD_SIGNATURE,
                "the token's signature does not verify with this cluster's key; " + _HOW_TO_GET,
            ) from exc
        except jwt.InvalidAlgorithmError as exc:
            raise unauthenticated(
                AuthFailure.BAD_SIGNATURE,
                f"the token is not signed with {self.algorithm}, the algorithm this cluster uses",
            ) from exc
        except jwt.InvalidIssuerError as exc:
            raise unauthenticated(
                AuthFailure.WRONG_ISSUER,
                f"the token was not issued by {self.issuer!r} (this cluster's issuer)",
            ) from exc
        except jwt.MissingRequiredClaimError as exc:
            raise unauthenticated(
                AuthFailure.MISSING_CLAIM,
                f"the token has no {exc.claim!r} claim (required: {', '.join(REQUIRED_CLAIMS)})",
            ) from exc
        except jwt.DecodeError as exc:
            raise unauthenticated(
                AuthFailure.MALFORMED, f"the token is not a valid JWT ({exc}); " + _HOW_TO_GET
            ) from exc
        except jwt.InvalidTokenError as exc:  # a claim of the wrong type (e.g. a numeric sub)
            raise unauthenticated(
                AuthFailure.INVALID_CLAIM, f"the token's claims are invalid: {exc}"
            ) from exc
        except jwt.PyJWTError as exc:  # e.g. a key that does not fit the token's algorithm
            raise unauthenticated(AuthFailure.MALFORMED, f"the token cannot be checked: {exc}") from exc
        return self._claims(payload, now)

    def _claims(self, payload: dict[str, Any], now: float) -> TokenClaims:
        for claim in REQUIRED_CLAIMS:
            if claim not in payload or payload[claim] in (None, ""):
                raise unauthenticated(
                    AuthFailure.MISSING_CLAIM,
                    f"the token has no {claim!r} claim (required: {', '.join(REQUIRED_CLAIMS)})",
                )
        exp = payload["exp"]
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise unauthenticated(AuthFailure.INVALID_CLAIM, "the token's 'exp' is not a number of seconds")
        if now >= exp + self.leeway_s:
            raise unauthenticated(
                AuthFailure.EXPIRED,
                f"the token expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(exp))}; {_HOW_TO_GET}",
            )
        nbf = payload.get("nbf")
        if isinstance(nbf, int | float) and now + self.leeway_s < nbf:
            raise unauthenticated(
                AuthFailure.NOT_YET_VALID, "the token is not valid yet (nbf is in the future)"
            )
        ptype = payload["principal_type"]
        if ptype not in {t.value for t in PrincipalType}:
            raise unauthenticated(
                AuthFailure.INVALID_CLAIM,
                f"the token's principal_type {ptype!r} is not one of {', '.join(t.value for t in PrincipalType)}",
            )
        name = payload["principal_name"]
        if not isinstance(name, str):
            raise unauthenticated(AuthFailure.INVALID_CLAIM, "the token's principal_name is not a string")
        return TokenClaims(str(payload["sub"]), PrincipalType(ptype), name, str(payload["iss"]), float(exp))
