"""danube_local.certs and ``danube-local certs``: a secured deployment's files in one directory."""

from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import danube_local.__main__ as cli
from danube_common.security import TokenVerifier
from danube_local.certs import DeploymentFiles, ServiceSpec, owner_ids, write_deployment_files
from danube_local.secure_mode import ISSUER

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

DAY_S = 86400.0
SERVICES = (ServiceSpec.parse("etcd"), ServiceSpec.parse("broker-1=broker1,10.0.0.5"))


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def names(cert: x509.Certificate) -> set[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n.value) for n in san}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def contents(files: DeploymentFiles) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in files.paths()}


@pytest.mark.parametrize(
    ("text", "identity", "hosts"),
    [
        ("lookup", "lookup", ("lookup",)),
        ("broker-1=broker1", "broker-1", ("broker1",)),
        ("broker-1=broker1,10.0.0.5, ::1", "broker-1", ("broker1", "10.0.0.5", "::1")),
        ("wal-uploader-1=wal-uploader1", "wal-uploader-1", ("wal-uploader1",)),
    ],
)
def test_service_specs_parse(text: str, identity: str, hosts: tuple[str, ...]) -> None:
    spec = ServiceSpec.parse(text)
    assert (spec.identity, spec.hosts) == (identity, hosts)
    assert spec.cert_hosts == (*hosts, "localhost", "127.0.0.1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "identity '' must be"),
        ("../x", "identity '../x' must be"),
        ("admin", "'admin' is reserved"),
        ("ca=ca", "'ca' is reserved"),
        ("broker-1=", "'' is not a host name"),
        ("broker-1=a b", "'a b' is not a host name"),
    ],
)
def test_bad_service_specs_say_what_is_allowed(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServiceSpec.parse(text)


def test_duplicate_identities_are_refused() -> None:
    with pytest.raises(ValueError, match="given twice"):
        DeploymentFiles(Path("x"), (ServiceSpec.parse("lookup"), ServiceSpec.parse("lookup=lk")))


def test_writes_every_file_with_its_mode(tmp_path: Path) -> None:
    files = DeploymentFiles(tmp_path / "secure", SERVICES)
    outcomes = write_deployment_files(files, admin_token_ttl_s=2 * DAY_S)
    assert all(o.made for o in outcomes)
    assert sorted(p.name for p in (tmp_path / "secure").iterdir()) == sorted(p.name for p in files.paths())
    assert mode(files.directory) == 0o700
    for path in files.paths():
        private = path.suffix in (".key", ".jwt") or path.name == "jwt-secret"
        assert mode(path) == (0o600 if private else 0o644), path.name

    ca = load(files.ca_cert)
    broker = load(files.pair("broker-1")[0])
    broker.verify_directly_issued_by(ca)
    assert broker.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "broker-1"
    assert names(broker) == {"broker1", "10.0.0.5", "localhost", "127.0.0.1"}
    san = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.0.0.5") in san.get_values_for_type(x509.IPAddress)
    usages = broker.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usages)
    admin = load(files.pair("admin")[0])
    admin_usages = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(admin_usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]

    verifier = TokenVerifier(key=files.jwt_secret.read_text(), issuer=ISSUER)
    claims = verifier.verify(files.admin_token.read_text())
    assert (claims.subject, claims.principal_name, claims.principal_type.value) == ("admin", "admin", "user")


def test_a_second_run_keeps_everything(tmp_path: Path) -> None:
    files = DeploymentFiles(tmp_path / "secure", SERVICES)
    write_deployment_files(files, admin_token_ttl_s=30 * DAY_S, now=1_000_000_000.0)
    before = contents(files)
    outcomes = write_deployment_files(files, admin_token_ttl_s=30 * DAY_S, now=1_000_000_000.0 + DAY_S)
    assert not any(o.made for o in outcomes), outcomes
    assert contents(files) == before


def test_only_what_changed_or_runs_out_is_made_anew(tmp_path: Path) -> None:
    first = DeploymentFiles(tmp_path, SERVICES)
    now = 1_000_000_000.0
    write_deployment_files(first, admin_token_ttl_s=30 * DAY_S, now=now)
    before = contents(first)
    # broker-1 is now also dialed at broker1.example: only its certificate is issued again.
    moved = DeploymentFiles(tmp_path, (SERVICES[0], ServiceSpec.parse("broker-1=broker1,broker1.example")))
    made = {o.name for o in write_deployment_files(moved, admin_token_ttl_s=30 * DAY_S, now=now) if o.made}
    assert made == {"broker-1.pem, .key"}
    after = contents(moved)
    assert {n for n in before if before[n] != after[n]} == {"broker-1.pem", "broker-1.key"}
    assert "broker1.example" in names(load(moved.pair("broker-1")[0]))
    # A token past half its lifetime, or one asked to be shorter-lived, is issued again.
    late = write_deployment_files(moved, admin_token_ttl_s=30 * DAY_S, now=now + 16 * DAY_S)
    assert {o.name for o in late if o.made} == {"admin.jwt"}
    shorter = write_deployment_files(moved, admin_token_ttl_s=DAY_S, now=now + 16 * DAY_S)
    assert {o.name for o in shorter if o.made} == {"admin.jwt"}
    # A damaged token is replaced; so is a token signed with another secret.
    moved.admin_token.write_text("not a token")
    assert {o.name for o in write_deployment_files(moved, now=now) if o.made} == {"admin.jwt"}


def test_a_new_ca_reissues_every_certificate(tmp_path: Path) -> None:
    files = DeploymentFiles(tmp_path, SERVICES)
    write_deployment_files(files)
    files.ca_key.unlink()
    made = {o.name for o in write_deployment_files(files) if o.made}
    assert made == {"ca.pem, ca.key", "etcd.pem, .key", "broker-1.pem, .key", "admin.pem, .key"}
    load(files.pair("etcd")[0]).verify_directly_issued_by(load(files.ca_cert))


def test_owner_is_given_every_file(tmp_path: Path) -> None:
    uid, gid = os.getuid(), os.getgid()
    files = DeploymentFiles(tmp_path / "secure", SERVICES)
    write_deployment_files(files, owner=(uid, gid))
    for path in [files.directory, *files.paths()]:
        assert (path.stat().st_uid, path.stat().st_gid) == (uid, gid)


def test_owner_ids_parse_names_and_numbers() -> None:
    assert owner_ids("0") == (0, 0)
    assert owner_ids("root") == (0, 0)
    assert owner_ids("root:0") == (0, 0)
    assert owner_ids("12345:678") == (12345, 678)
    with pytest.raises(ValueError, match="no user 'no-such-user'"):
        owner_ids("no-such-user")
    with pytest.raises(ValueError, match="no group 'no-such-group'"):
        owner_ids("root:no-such-group")


def test_cli_writes_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["certs", "--dir", str(tmp_path / "s"), "--service", "lookup", "--service", "broker-1=broker1"]
    assert cli.main([*argv, "--admin-token-ttl", "7d"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "made: lookup, for lookup, localhost, 127.0.0.1" in out
    assert "admin.jwt" in out and "super admin 'admin'" in out
    assert cli.main([*argv, "--admin-token-ttl", "7d"]) == cli.EXIT_OK
    assert "made" not in capsys.readouterr().out.replace("made if missing", "")


def test_cli_refuses_bad_input_saying_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["certs", "--dir", str(tmp_path), "--service", "a b"])
    assert exc.value.code == cli.EXIT_USAGE
    assert "identity 'a b' must be" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["certs", "--dir", str(tmp_path), "--admin-token-ttl", "soon"])
    assert "invalid duration 'soon'" in capsys.readouterr().err
    code = cli.main(["certs", "--dir", str(tmp_path), "--service", "x", "--service", "x=y"])
    assert code == cli.EXIT_USAGE and "given twice" in capsys.readouterr().out
    assert cli.main(["certs", "--dir", str(tmp_path), "--owner", "no-such-user"]) == cli.EXIT_USAGE
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["certs", "--dir", str(blocker / "sub")]) == cli.EXIT_FAILED
    assert "cannot write" in capsys.readouterr().out
