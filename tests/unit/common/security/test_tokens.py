"""JWT issuing and verification: the refusal table, algorithms, and the verified-token cache."""

from __future__ import annotations

import time
from collections.abc import Callable

import jwt
import pytest

from danube_common.errors import ConfigError, TokenExpired, Unauthenticated
from danube_common.security.principal import PrincipalType
from danube_common.security.tokens import AuthFailure, TokenVerifier, issue_token, parse_bearer
from tests.support.certs import ec_key, pem_key, pem_public, rsa_key

pytestmark = pytest.mark.unit

SECRET = "s" * 32
OTHER_SECRET = "o" * 32
ISSUER = "danube-test"


def _raw(claims: dict[str, object], key: str = SECRET) -> str:
    return jwt.encode(claims, key, algorithm="HS256")


def _claims(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "iss": ISSUER,
        "sub": "alice",
        "exp": int(time.time()) + 600,
        "principal_type": "user",
        "principal_name": "alice",
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def _verifier(**kw: object) -> TokenVerifier:
    return TokenVerifier(key=SECRET, issuer=ISSUER, algorithm="HS256", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: "not-a-jwt", AuthFailure.MALFORMED),
        (lambda: "a.b.c", AuthFailure.MALFORMED),
        (lambda: _raw(_claims(exp=int(time.time()) - 10)), AuthFailure.EXPIRED),
        (lambda: _raw(_claims(), key=OTHER_SECRET), AuthFailure.BAD_SIGNATURE),
        (lambda: _raw(_claims(iss="someone-else")), AuthFailure.WRONG_ISSUER),
        (lambda: _raw(_claims(iss=None)), AuthFailure.MISSING_CLAIM),
        (lambda: _raw(_claims(exp=None)), AuthFailure.MISSING_CLAIM),
        (lambda: _raw(_claims(sub=None)), AuthFailure.MISSING_CLAIM),
        (lambda: _raw(_claims(principal_type=None)), AuthFailure.MISSING_CLAIM),
        (lambda: _raw(_claims(principal_name=None)), AuthFailure.MISSING_CLAIM),
        (lambda: _raw(_claims(principal_type="root")), AuthFailure.INVALID_CLAIM),
        (lambda: _raw(_claims(nbf=int(time.time()) + 600)), AuthFailure.NOT_YET_VALID),
    ],
    ids=[
        "garbage",
        "three-dots",
        "expired",
        "other-key",
        "wrong-issuer",
        "no-iss",
        "no-exp",
        "no-sub",
        "no-principal-type",
        "no-principal-name",
        "bad-principal-type",
        "not-yet-valid",
    ],
)
def test_refusals_say_why(make: Callable[[], str], reason: AuthFailure) -> None:
    """Tokens are made when the test runs: made at collection, a long suite would expire them."""
    with pytest.raises(Unauthenticated) as info:
        _verifier().verify(make())
    assert info.value.reason == reason.value
    assert reason.value in info.value.message
    assert info.value.grpc_status.name == "UNAUTHENTICATED"


def test_expired_token_is_its_own_class() -> None:
    with pytest.raises(TokenExpired) as info:
        _verifier().verify(_raw(_claims(exp=int(time.time()) - 10)))
    assert info.value.code == "TOKEN_EXPIRED"


def test_valid_hs256_token_gives_its_principal() -> None:
    token = issue_token("alice-sub", PrincipalType.SERVICE_ACCOUNT, "billing", 60, SECRET, ISSUER)
    claims = _verifier().verify(token)
    assert (claims.subject, claims.principal_type, claims.principal_name, claims.issuer) == (
        "alice-sub",
        PrincipalType.SERVICE_ACCOUNT,
        "billing",
        ISSUER,
    )
    assert claims.expires_at == pytest.approx(time.time() + 60, abs=2)


@pytest.mark.parametrize(("algorithm", "make_key"), [("RS256", rsa_key), ("ES256", ec_key)])
def test_public_key_algorithms(algorithm: str, make_key: object) -> None:
    key = make_key()  # type: ignore[operator]
    other = make_key()  # type: ignore[operator]
    verifier = TokenVerifier(key=pem_public(key), issuer=ISSUER, algorithm=algorithm)
    good = issue_token("bob", "user", "bob", 60, pem_key(key), ISSUER, algorithm)
    assert verifier.verify(good).principal_name == "bob"
    forged = issue_token("bob", "user", "bob", 60, pem_key(other), ISSUER, algorithm)
    with pytest.raises(Unauthenticated) as info:
        verifier.verify(forged)
    assert info.value.reason == AuthFailure.BAD_SIGNATURE.value
    expired = issue_token("bob", "user", "bob", 60, pem_key(key), ISSUER, algorithm, now=time.time() - 120)
    with pytest.raises(TokenExpired):
        verifier.verify(expired)


def test_a_token_cannot_choose_its_algorithm() -> None:
    """An HS256 token signed with the RS256 verifier's public key (the classic confusion) fails."""
    key = rsa_key()
    verifier = TokenVerifier(key=pem_public(key), issuer=ISSUER, algorithm="RS256")
    hs = _raw(_claims(), key=SECRET)
    with pytest.raises(Unauthenticated) as info:
        verifier.verify(hs)
    assert info.value.reason == AuthFailure.BAD_SIGNATURE.value


def test_configuration_errors_are_clear() -> None:
    with pytest.raises(ConfigError, match="at least 32"):
        TokenVerifier(key="short", issuer=ISSUER)
    with pytest.raises(ConfigError, match="unsupported JWT algorithm"):
        TokenVerifier(key=SECRET, issuer=ISSUER, algorithm="none")
    with pytest.raises(ConfigError, match="not a PEM public key"):
        TokenVerifier(key=b"nope", issuer=ISSUER, algorithm="ES256")
    with pytest.raises(ConfigError, match=r"needs jwt\.secret_file"):
        TokenVerifier.from_files(issuer=ISSUER, algorithm="HS256")
    with pytest.raises(ConfigError, match=r"cannot read jwt\.public_key_file"):
        TokenVerifier.from_files(issuer=ISSUER, algorithm="RS256", public_key_file="/nonexistent/key.pem")


def test_parse_bearer() -> None:
    assert parse_bearer("Bearer abc") == "abc"
    assert parse_bearer("bearer abc") == "abc"
    for bad in ("abc", "Basic abc", "Bearer ", ""):
        with pytest.raises(Unauthenticated) as info:
            parse_bearer(bad)
        assert info.value.reason == "malformed"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_cache_verifies_once_within_ttl_and_again_after() -> None:
    clock = Clock()
    v = _verifier(clock=clock, cache_ttl_s=30)
    token = issue_token("alice", "user", "alice", 600, SECRET, ISSUER, now=clock.now)
    for _ in range(5):
        v.verify(token)
    assert v.verifications == 1
    clock.now += 31
    v.verify(token)
    assert v.verifications == 2


def test_cache_never_serves_a_token_past_its_exp() -> None:
    clock = Clock()
    v = _verifier(clock=clock, cache_ttl_s=30)
    token = issue_token("alice", "user", "alice", 10, SECRET, ISSUER, now=clock.now)
    v.verify(token)
    clock.now += 11  # inside the cache ttl, past exp
    with pytest.raises(TokenExpired):
        v.verify(token)
    assert v.cache_size() == 0


def test_cache_is_bounded_lru() -> None:
    clock = Clock()
    v = _verifier(clock=clock, cache_max_entries=3)
    tokens = [issue_token(f"u{i}", "user", f"u{i}", 600, SECRET, ISSUER, now=clock.now) for i in range(5)]
    for t in tokens:
        v.verify(t)
    assert v.cache_size() == 3
    v.verify(tokens[-1])  # still cached
    assert v.verifications == 5
    v.verify(tokens[0])  # evicted: verified again
    assert v.verifications == 6


def test_refused_tokens_are_not_cached() -> None:
    v = _verifier()
    bad = _raw(_claims(), key=OTHER_SECRET)
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            v.verify(bad)
    assert v.cache_size() == 0
