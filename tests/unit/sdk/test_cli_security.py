"""``danube-admin security ...``: parsing of every command, the helpers' tables (durations,
binding resources), and the offline token commands: a token made by ``tokens create`` verifies
with the verifier the services build from their ``auth.jwt`` config, ``tokens validate`` says
why a token is refused, and neither reads the admin URL or the auth flags."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from danube_common.errors import MD_ERROR_CODE, ConfigError
from danube_common.security import JwtConfig, PrincipalType, issue_token, tokens
from danube_local.secure import ensure_jwt_secret
from danube_sdk.cli import admin
from danube_sdk.cli import admin_security as sec
from danube_sdk.cli.auth_flags import ENV_TOKEN

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def parse(*argv: str) -> argparse.Namespace:
    return admin.build_parser().parse_args(list(argv))


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    """The secret as a local secure cluster writes it (danube_local.secure)."""
    return ensure_jwt_secret(tmp_path / "jwt-secret")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_TOKEN, sec.ENV_SECRET, admin.ENV_ADMIN_URL):
        monkeypatch.delenv(name, raising=False)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = admin.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------- parsing


def test_every_security_command_parses() -> None:
    a = parse("security", "roles", "create", "pub", "--permissions", "lookup,produce", "--description", "d")
    assert (a.func, a.connect, a.name, a.permissions, a.description) == (
        sec.roles_create,
        sec.SecurityAdmin.connect,
        "pub",
        "lookup,produce",
        "d",
    )
    a = parse("security", "roles", "update", "pub", "-p", "consume")
    assert (a.func, a.description) == (sec.roles_update, None)  # None: the description is kept
    assert parse("security", "roles", "list", "-o", "json").output == "json"
    assert parse("security", "roles", "get", "pub").func is sec.roles_get
    assert parse("security", "roles", "delete", "pub").func is sec.roles_delete
    a = parse(
        "security",
        "bindings",
        "create",
        "b1",
        "--principal",
        "user:alice",
        "--role",
        "producer",
        "--scope",
        "topic",
        "--resource",
        "/ns/t",
    )
    assert (a.func, a.name, a.principal, a.role, a.scope, a.resource) == (
        sec.bindings_create,
        "b1",
        "user:alice",
        "producer",
        "topic",
        "/ns/t",
    )
    assert parse("security", "bindings", "list", "--principal", "user:a").principal == "user:a"
    assert parse("security", "bindings", "list").principal is None
    assert parse("security", "bindings", "get", "b1").func is sec.bindings_get
    assert parse("security", "bindings", "delete", "b1").func is sec.bindings_delete
    a = parse("security", "tokens", "create", "--subject", "s", "--ttl", "30d", "--type", "service_account")
    assert (a.func, a.connect, a.subject, a.ttl, a.type, a.issuer, a.algorithm) == (
        sec.tokens_create,
        None,  # offline
        "s",
        30 * 86400.0,
        "service_account",
        "danube",  # JwtConfig's default issuer: the services'
        "HS256",
    )
    assert parse("security", "tokens", "create", "--subject", "s").ttl == 8760 * 3600.0
    a = parse("security", "tokens", "validate", "--token", "a.b.c", "-o", "json")
    assert (a.func, a.connect, a.token, a.output) == (sec.tokens_validate, None, "a.b.c", "json")


def test_defaults_match_the_services() -> None:
    assert JwtConfig.model_fields["issuer"].default == sec.DEFAULT_ISSUER
    assert JwtConfig.model_fields["leeway_s"].default == sec.LEEWAY_S
    assert (sec.ALGORITHMS, sec.HMAC_ALGORITHMS) == (tokens.ALGORITHMS, tokens.HMAC_ALGORITHMS)


def test_other_commands_do_not_load_the_token_code() -> None:
    """danube_common.security (pydantic, cryptography, jwt) is imported by the token commands
    only: it would more than double the start-up time of every other command."""
    code = "import sys, danube_sdk.cli.admin; print(sorted(m for m in sys.modules if m.startswith(('jwt', 'danube_common.security'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "argv",
    [
        ["security", "bindings", "create", "b", "--principal", "user:a", "--role", "r", "--scope", "galaxy"],
        ["security", "bindings", "create", "b", "--principal", "user:a", "--scope", "cluster"],  # no --role
        ["security", "roles", "create", "r"],  # no --permissions
        ["security", "tokens", "create"],  # no --subject
        ["security", "tokens", "create", "--subject", "s", "--ttl", "5"],
        ["security", "tokens", "create", "--subject", "s", "--type", "broker_internal"],
        ["security", "roles"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin.main(argv)
    assert info.value.code == 2
    assert "usage: danube-admin security" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["security", "--help"],
        ["security", "roles", "--help"],
        ["security", "roles", "create", "--help"],
        ["security", "bindings", "create", "--help"],
        ["security", "tokens", "create", "--help"],
        ["security", "tokens", "validate", "--help"],
    ],
)
def test_help_has_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin.main(argv)
    assert info.value.code == 0
    assert "examples:" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("15m", 900), ("1h", 3600), ("1h30m", 5400), ("30d", 30 * 86400), ("8760h", 8760 * 3600)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert sec.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "1x", "h", "-1h", "0s", "1h 30m", "1.5h"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        sec.parse_duration(text)


@pytest.mark.parametrize(
    ("scope", "resource", "expected"),
    [
        ("cluster", None, ""),
        ("namespace", "orders", "orders"),
        ("namespace", "/orders", "orders"),
        ("topic", "/orders/eu", "/orders/eu"),
    ],
)
def test_binding_resource(scope: str, resource: str | None, expected: str) -> None:
    assert sec.binding_resource(scope, resource) == expected


@pytest.mark.parametrize(
    ("scope", "resource", "message"),
    [
        ("cluster", "orders", "--scope cluster takes no --resource"),
        ("namespace", None, "--scope namespace needs --resource (e.g. --resource /analytics)"),
        ("topic", "", "--scope topic needs --resource (e.g. --resource /analytics/clicks)"),
    ],
)
def test_binding_resource_refuses(scope: str, resource: str | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sec.binding_resource(scope, resource)


def test_split_permissions() -> None:
    assert sec.split_permissions(" lookup, produce,,") == ["lookup", "produce"]
    with pytest.raises(ConfigError, match="at least one"):
        sec.split_permissions(" , ")


# ---------------------------------------------------------------------------- tokens create


def test_created_token_is_accepted_by_the_services_verifier(
    secret_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "security",
        "tokens",
        "create",
        "--subject",
        "alice",
        "--ttl",
        "1h",
        "--secret-file",
        str(secret_file),
    ]
    code, out, err = run(argv, capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 1  # only the token: TOKEN=$(...) works
    # The verifier a service builds from its auth.jwt config (default issuer, HS256).
    claims = JwtConfig(secret_file=str(secret_file)).verifier().verify(lines[0])
    assert (claims.subject, claims.principal_type, claims.principal_name, claims.issuer) == (
        "alice",
        PrincipalType.USER,
        "alice",
        "danube",
    )
    assert 3590 < claims.expires_at - time.time() <= 3600


def test_create_from_the_environment_with_json_output(
    secret_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(sec.ENV_SECRET, secret_file.read_text() + "\n")  # surrounding whitespace ignored
    argv = [
        "-o",
        "json",
        "security",
        "tokens",
        "create",
        "--subject",
        "etl",
        "--type",
        "service_account",
        "--principal-name",
        "billing-etl",
        "--issuer",
        "corp",
    ]
    code, out, _ = run(argv, capsys)
    doc = json.loads(out)
    assert code == 0 and (doc["principal"], doc["issuer"], doc["algorithm"]) == (
        "service_account:billing-etl",
        "corp",
        "HS256",
    )
    claims = JwtConfig(secret_file=str(secret_file), issuer="corp").verifier().verify(doc["token"])
    assert (claims.subject, claims.principal_name) == ("etl", "billing-etl")
    assert claims.expires_at == doc["exp"]


def test_create_ignores_the_admin_url_and_auth_flags(
    secret_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A token in DANUBE_TOKEN with a plaintext admin URL would refuse to connect; offline
    commands never connect, so they do not care."""
    monkeypatch.setenv(ENV_TOKEN, "some.old.token")
    argv = ["--admin-url", "http://127.0.0.1:1", "security", "tokens", "create", "--subject", "a"]
    code, out, _ = run([*argv, "--secret-file", str(secret_file)], capsys)
    assert code == 0 and out.count(".") == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "no HS256 secret: give --secret-file PATH"),
        (["--secret-file", "/nonexistent/jwt-secret"], "cannot read --secret-file /nonexistent/jwt-secret"),
        (["--secret-file", "SHORT"], "use at least 32 random bytes"),
        (["--algorithm", "ES256"], "ES256 tokens need --private-key-file PATH"),
        (["--principal-name", "a b", "--secret-file", "SECRET"], "invalid principal name 'a b'"),
    ],
)
def test_create_errors_exit_1(
    extra: list[str], message: str, secret_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = tmp_path / "short"
    short.write_text("too-short")
    extra = [{"SHORT": str(short), "SECRET": str(secret_file)}.get(x, x) for x in extra]
    code, out, err = run(["security", "tokens", "create", "--subject", "a", *extra], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("error: ") and message in err, err


def test_es256_create_and_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "jwt.key", tmp_path / "jwt.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    argv = ["security", "tokens", "create", "--subject", "ci", "--algorithm", "ES256"]
    code, out, _ = run([*argv, "--private-key-file", str(private)], capsys)
    token = out.strip()
    assert code == 0
    cfg = JwtConfig(algorithm="ES256", public_key_file=str(public))
    assert cfg.verifier().verify(token).subject == "ci"
    argv = ["security", "tokens", "validate", "--token", token, "--algorithm", "ES256"]
    code, out, _ = run([*argv, "--public-key-file", str(public)], capsys)
    assert code == 0 and "user:ci" in out


# ---------------------------------------------------------------------------- tokens validate


def make_token(
    secret_file: Path, *, ttl_s: float = 600, issuer: str = "danube", now: float | None = None
) -> str:
    return issue_token("bob", "user", "bob", ttl_s, secret_file.read_text().strip(), issuer, now=now)


def test_validate_prints_the_claims(secret_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = make_token(secret_file)
    code, out, _ = run(
        ["security", "tokens", "validate", "--token", token, "--secret-file", str(secret_file)], capsys
    )
    assert code == 0
    fields = dict(line.split(None, 1) for line in out.splitlines()[1:])
    assert (fields["valid"], fields["subject"], fields["principal"], fields["issuer"]) == (
        "yes",
        "bob",
        "user:bob",
        "danube",
    )
    assert "(in 9m" in fields["expires_at"]


def test_validate_reads_the_token_from_file_then_env(
    secret_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = tmp_path / "bob.jwt"
    token_file.write_text(make_token(secret_file) + "\n")
    argv = ["-o", "json", "security", "tokens", "validate", "--secret-file", str(secret_file)]
    code, out, _ = run([*argv, "--token-file", str(token_file)], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["valid"] and doc["principal"] == "user:bob" and doc["claims"]["sub"] == "bob"
    monkeypatch.setenv(ENV_TOKEN, make_token(secret_file))
    code, out, _ = run(argv, capsys)
    assert code == 0 and json.loads(out)["valid"]
    monkeypatch.delenv(ENV_TOKEN)
    code, _, err = run(argv, capsys)
    assert code == 1 and "no token to check: give --token JWT, --token-file PATH or set DANUBE_TOKEN" in err


@pytest.mark.parametrize(
    ("kind", "reason", "message"),
    [
        ("expired", "expired", "the token expired at"),
        ("other-secret", "bad_signature", "signature does not verify"),
        ("other-issuer", "wrong_issuer", "not issued by 'danube'"),
        ("garbage", "malformed", "not a valid JWT"),
    ],
)
def test_validate_says_why_a_token_is_refused(
    kind: str,
    reason: str,
    message: str,
    secret_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = ensure_jwt_secret(tmp_path / "other-secret")
    token = {
        "expired": lambda: make_token(secret_file, ttl_s=60, now=time.time() - 3600),
        "other-secret": lambda: make_token(other),
        "other-issuer": lambda: make_token(secret_file, issuer="elsewhere"),
        "garbage": lambda: "not-a-jwt",
    }[kind]()
    argv = ["security", "tokens", "validate", "--token", token, "--secret-file", str(secret_file)]
    code, out, err = run(argv, capsys)
    assert (code, out) == (1, "")
    assert err.startswith("error: ") and f"({reason})" in err and message in err, err
    code, out, err = run(["-o", "json", *argv], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["valid"] is False and doc["reason"] == reason and message in doc["error"]


# ---------------------------------------------------------------------------- errors of the online commands


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, danube_code: str) -> None:
        self._code, self._details, self._md = code, details, ((MD_ERROR_CODE, danube_code),)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._md


@pytest.mark.parametrize(
    ("status", "code", "hint"),
    [
        (grpc.StatusCode.NOT_FOUND, "NOT_FOUND", "danube-admin security roles list"),
        (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", "need manage_cluster on the cluster"),
    ],
)
def test_security_errors_get_security_hints(status: grpc.StatusCode, code: str, hint: str) -> None:
    exc = FakeRpcError(status, "role 'x' does not exist", code)
    message, got = admin.explain(exc, "http://h:1", 3.0, group="security")
    assert message == "role 'x' does not exist" and hint in got
    _, other = admin.explain(exc, "http://h:1", 3.0, group="schemas")
    assert "security" not in other
