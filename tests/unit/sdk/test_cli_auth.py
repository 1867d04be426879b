"""The security flags of danube-cli and danube-admin: where the token comes from (flag, file,
DANUBE_TOKEN, in that order), TLS files, usage errors, and runs against the fake cluster over
TLS that check the token reached the server."""

from __future__ import annotations

import argparse
import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from danube_common.errors import ConfigError
from danube_sdk.cli import admin
from danube_sdk.cli import produce_consume as cli
from danube_sdk.cli.auth_flags import ENV_TOKEN, resolve_auth
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster
from tests.unit.sdk.tls_support import Recorder, make_certs, server_creds

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def cli_parse(*argv: str, env: dict[str, str] | None = None) -> argparse.Namespace:
    return cli.build_parser(env or {}).parse_args(["consume", "-m", "s", *argv])


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "app.jwt"
    path.write_text("from.the.file\n")  # a trailing newline, as `echo > file` leaves it
    return path


def test_no_flags_no_security() -> None:
    auth = resolve_auth(cli_parse())
    assert auth.tls is None and auth.token is None


def test_token_from_flag_file_and_env(token_file: Path) -> None:
    assert resolve_auth(cli_parse("--token", "from.the.flag")).token == "from.the.flag"
    assert resolve_auth(cli_parse("--token-file", str(token_file))).token == "from.the.file"
    assert resolve_auth(cli_parse(env={ENV_TOKEN: "from.the.env"})).token == "from.the.env"


def test_token_precedence_flag_then_file_then_env(token_file: Path) -> None:
    env = {ENV_TOKEN: "from.the.env"}
    assert resolve_auth(cli_parse("--token", "from.the.flag", env=env)).token == "from.the.flag"
    assert resolve_auth(cli_parse("--token-file", str(token_file), env=env)).token == "from.the.file"
    with pytest.raises(ConfigError, match="not both"):
        resolve_auth(cli_parse("--token", "a", "--token-file", str(token_file)))


def test_tls_flags(tmp_path: Path) -> None:
    auth = resolve_auth(cli_parse("--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "c.key"))
    assert auth.tls is not None
    assert (auth.tls.ca_file, auth.tls.cert_file, auth.tls.key_file) == ("ca.pem", "c.pem", "c.key")
    assert resolve_auth(cli_parse("--tls-ca", "ca.pem")).tls is not None
    with pytest.raises(ConfigError, match="go together"):
        resolve_auth(cli_parse("--tls-cert", "c.pem"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--token", "a", "--token-file", "f"], "give --token or --token-file, not both"),
        (["--token-file", "/nonexistent/app.jwt"], "cannot read --token-file /nonexistent/app.jwt"),
        (["--tls-key", "k.pem"], "--tls-cert and --tls-key go together"),
        (["--token", "Bearer x"], "give the JWT alone"),
    ],
)
def test_cli_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["produce", "-m", "x", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_empty_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.jwt").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        resolve_auth(cli_parse("--token-file", str(tmp_path / "empty.jwt")))


def test_token_over_plaintext_is_an_error_with_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["produce", "-s", "http://127.0.0.1:1", "-m", "x", "--token", "a.b.c"])
    err = capsys.readouterr().err
    assert code == 1 and "only sent over TLS" in err and "--tls-ca" in err and "Traceback" not in err


def test_help_shows_security_flags_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for main, argv in ((cli.main, ["produce", "--help"]), (admin.main, ["--help"])):
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        for flag in ("--token ", "--token-file", "--tls-ca", "--tls-cert", "--tls-key", ENV_TOKEN):
            assert flag in out, (argv, flag)


def admin_parse(*argv: str) -> argparse.Namespace:
    return admin.build_parser().parse_args(list(argv))


def test_admin_flags_before_or_after_the_command(token_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = admin_parse("--token-file", str(token_file), "--tls-ca", "ca.pem", "brokers", "list")
    after = admin_parse("brokers", "list", "--token-file", str(token_file), "--tls-ca", "ca.pem")
    for args in (before, after):
        auth = resolve_auth(args)
        assert auth.token == "from.the.file" and auth.tls is not None and auth.tls.ca_file == "ca.pem"
    monkeypatch.setenv(ENV_TOKEN, "from.the.env")
    assert resolve_auth(admin_parse("brokers", "list")).token == "from.the.env"
    assert resolve_auth(admin_parse("brokers", "list", "--token", "from.the.flag")).token == "from.the.flag"
    monkeypatch.delenv(ENV_TOKEN)
    assert resolve_auth(admin_parse("brokers", "list")).token is None


def test_admin_command_options_are_not_taken_for_token_prefixes() -> None:
    args = admin_parse("--token", "a.b.c", "topics", "move", "/default/t", "--to", "broker-2")
    assert (args.to, args.token) == ("broker-2", "a.b.c")


def test_admin_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin.main(["--tls-cert", "c.pem", "brokers", "list"])
    assert info.value.code == 2 and "go together" in capsys.readouterr().err


# ---------------------------------------------------------------------------- runs over TLS


@pytest.fixture
async def tls_cluster(certs: Path) -> AsyncIterator[tuple[FakeCluster, Recorder]]:
    recorder = Recorder()
    fake = await FakeCluster(server_credentials=server_creds(certs), interceptors=[recorder]).start()
    try:
        yield fake, recorder
    finally:
        await fake.stop()


async def test_cli_produce_and_consume_send_the_token(
    tls_cluster: tuple[FakeCluster, Recorder],
    certs: Path,
    token_file: Path,
) -> None:
    cluster, recorder = tls_cluster
    common = ["-s", cluster.service_url, "--tls-ca", str(certs / "ca.pem"), "--token-file", str(token_file)]
    out, err = io.StringIO(), io.StringIO()
    cluster.create_topic("/default/t")
    consume = cli.build_parser({}).parse_args(["consume", *common, "-t", "/default/t", "-m", "s", "-c", "1"])
    consuming = asyncio.create_task(cli.run_consume(consume, out=out, err=err, stop=asyncio.Event()))
    await wait_until(lambda: "s" in cluster.topics["/default/t"].subs, timeout_s=5, what="subscribed")
    produce = cli.build_parser({}).parse_args(["produce", *common, "-t", "/default/t", "-m", "hi"])
    assert await cli.run_produce(produce, out=out, err=err) == 0
    assert await asyncio.wait_for(consuming, 10) == 0
    assert "received 1 messages" in err.getvalue()
    assert {"CreateProducer", "Subscribe", "ReceiveBatches"} <= recorder.methods()
    assert set(recorder.headers()) == {"Bearer from.the.file"}


async def test_admin_sends_the_token_on_sync_and_registry_calls(
    tls_cluster: tuple[FakeCluster, Recorder],
    certs: Path,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster, recorder = tls_cluster
    flags = [
        "--admin-url",
        cluster.service_url,
        "--tls-ca",
        str(certs / "ca.pem"),
        "--token-file",
        str(token_file),
    ]
    # The fake does not serve the admin API: the call is refused, but it reached the server.
    assert await asyncio.to_thread(admin.main, [*flags, "brokers", "list"]) == 1
    assert "does not serve the admin API" in capsys.readouterr().err
    register = ["schemas", "register", "orders", "-t", "json_schema", "--schema", "{}"]
    assert await asyncio.to_thread(admin.main, [*flags, *register]) == 0
    assert {"ListBrokers", "RegisterSchema"} <= recorder.methods()
    assert set(recorder.headers()) == {"Bearer from.the.file"}


async def test_admin_without_the_ca_explains_the_tls_failure(
    tls_cluster: tuple[FakeCluster, Recorder], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, _ = tls_cluster
    code = await asyncio.to_thread(
        admin.main, ["--admin-url", cluster.service_url, "--timeout-s", "2", "brokers", "list"]
    )
    err = capsys.readouterr().err
    assert code == 1 and "--tls-ca" in err, err
