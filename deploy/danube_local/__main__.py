"""``danube-local``: run a whole Danube cluster on this machine, without Docker.

danube-local up                # etcd, 2 leader replicas, lookup (:6650, admin :50051), 3 brokers (+ WAL uploaders), 2 load managers
danube-local up --demo         # the same, then a produce/consume round trip
danube-local up --secure       # TLS + mTLS between services + JWT auth + RBAC on every call
danube-local certs --dir DIR --service broker-1=broker1 ...   # a secured deployment's files (containers)
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path

from danube_common.errors import ConfigError
from danube_local.certs import DeploymentFiles, ServiceSpec, owner_ids, write_deployment_files
from danube_local.cluster import ClusterError, LocalCluster
from danube_local.demo import DemoSecurity
from danube_local.procs import loopback_no_proxy
from danube_local.secure_mode import (
    ADMIN_SUBJECT,
    DEMO_CONSUMER,
    DEMO_GRANTS,
    DEMO_PRODUCER,
    INTERNAL_IDENTITIES,
    TOKEN_TTL_S,
)
from danube_local.supervise import Supervisor
from danube_local.trace_commands import (
    LocalTracing,
    add_traces_parser,
    cmd_traces,
    show_demo_trace,
    trace_demo_client,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

MAIN_EPILOG = """\
examples:
  danube-local up
  danube-local up --demo
  danube-local up --secure --demo
  danube-local up --brokers 1 --load-managers 0 --leaders 0 --no-uploaders   # the smallest cluster
  danube-local up --etcd-endpoint 10.0.0.5:2379 --cluster staging
  danube-local certs --dir ./secure --service lookup --service broker-1=broker1,10.0.0.5
  danube-local up --help
"""

UP_EPILOG = """\
examples:
  danube-local up                                  # 3 brokers, 2 load managers, 2 leader replicas
  danube-local up --brokers 3 --broker-ports 6651,6652,6653
  danube-local up --brokers 1 --load-managers 0 --leaders 0   # no control plane: lookups place topics
  danube-local up --demo                           # start, then produce and consume 10 messages
  danube-local up --demo --exit-after-demo         # the same, then stop (exit code = demo result)
  danube-local up --lookup-port 0 --admin-port 0 --console-port 0   # any free ports (printed once started)
  danube-local up --etcd-endpoint 127.0.0.1:2379   # use a running etcd instead of starting one
  danube-local up --s3-endpoint http://127.0.0.1:9000 --s3-bucket danube-wal   # history in MinIO
  danube-local up --planner spark                  # also the PySpark rebalancing planner
  danube-local up --secure --demo                  # TLS, mTLS, tokens and RBAC; the demo shows a refusal

State (etcd data, logs, ready files; with --secure the CA, certificates, JWT secret and tokens
in secure/) lives in the work directory; delete it for a fresh cluster.
"""


CERTS_EPILOG = f"""\
what it writes into DIR (mode 0700; keys, secret and token 0600, certificates 0644):
  ca.pem, ca.key            the CA (made once, then kept)
  IDENTITY.pem, .key        one per --service: common name IDENTITY, subject alternative names
                            HOST... (default: IDENTITY) plus localhost and 127.0.0.1; server and
                            client use (mTLS between services, and towards etcd)
  admin.pem, admin.key      a client certificate for people and tools
  jwt-secret                the HS256 secret the servers check tokens with (auth.jwt.secret_file)
  admin.jwt                 a token of the super admin {ADMIN_SUBJECT!r} (auth.super_admins)

Run it again at will: it keeps what is still good (the CA and secret; certificates issued by
the CA for the same hosts and valid for 30 more days; a token that verifies and has between half
and all of --admin-token-ttl left) and makes the rest. The services' settings to go with the
files: auth.internal_identities = {",".join(INTERNAL_IDENTITIES)}
(so name the services' certificates broker-1, leader-1, ...), auth.super_admins = {ADMIN_SUBJECT},
auth.client_cert_users = false; deploy/docker-compose.secure.yml sets them all (docs/security.md).

examples:
  danube-local certs --dir ./secure --service lookup --service broker-1=broker1,10.0.0.5
  danube-local certs --dir /etc/danube/secure --owner danube --admin-token-ttl 7d \\
      --service etcd --service lookup --service leader-1=leader1 --service broker-1=broker1
  (deploy/docker-compose.secure.yml runs it as its one-shot `certs` service)
"""


def _duration(text: str) -> float:
    """``30d``, ``12h``, ... in seconds (the SDK's parser, imported only when used: the launcher
    itself runs without the SDK installed)."""
    from danube_sdk.cli.admin_security import parse_duration

    return parse_duration(text)


def _service_spec(text: str) -> ServiceSpec:
    try:
        return ServiceSpec.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _ports(text: str) -> list[int]:
    try:
        ports = [int(p) for p in text.split(",") if p.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated port numbers, got {text!r}") from exc
    if any(not 0 <= p <= 65535 for p in ports):
        raise argparse.ArgumentTypeError(f"ports must be between 0 and 65535, got {text!r}")
    return ports


def _broker_count(text: str) -> int:
    """A number, or ``auto``: one broker per core this process may run on (a broker's event loop
    uses one core; see docs/benchmarks.md, "The cores question")."""
    if text.strip().lower() == "auto":
        return max(
            1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        )
    try:
        return int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number of brokers or 'auto', got {text!r}") from exc


def _port(text: str) -> int:
    ports = _ports(text)
    if len(ports) != 1:
        raise argparse.ArgumentTypeError(f"expected one port number, got {text!r}")
    return ports[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="danube-local",
        description="Run a local Danube cluster (etcd, leader service, lookup, brokers, load managers) as "
        "child processes, without Docker.",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    up = sub.add_parser(
        "up",
        help="start a local cluster and keep it running until Ctrl-C",
        description="Start etcd, the leader service, the lookup service, N brokers and the load managers; "
        "print their endpoints; stop all on Ctrl-C.",
        epilog=UP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    up.add_argument(
        "--brokers",
        type=_broker_count,
        default=3,
        metavar="N",
        help="number of brokers, or 'auto' for one per CPU core available (a broker uses one core); "
        "default: 3",
    )
    up.add_argument(
        "--leaders",
        type=int,
        default=2,
        metavar="N",
        help="leader service replicas (elections for the control plane; default: 2)",
    )
    up.add_argument(
        "--uploaders",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one WAL uploader per broker, shipping reliable topics' history to a local object store "
        "in the work directory (objects/); --no-uploaders keeps history on each broker's disk only",
    )
    up.add_argument(
        "--planner",
        choices=("spark", "python"),
        help="also run the rebalancing planner (danube-planner): spark (PySpark local[*], needs Java 17) "
        "or python (the same computation without Spark); default: no planner",
    )
    up.add_argument(
        "--s3-endpoint",
        metavar="URL",
        help="keep reliable topics' history in S3 (AWS, MinIO) instead of the local directory: the "
        "endpoint, e.g. http://127.0.0.1:9000 for MinIO; 'aws' for AWS itself. Credentials come from "
        "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY",
    )
    up.add_argument("--s3-bucket", metavar="NAME", default="danube-wal", help="bucket (default danube-wal)")
    up.add_argument("--s3-region", metavar="REGION", default="us-east-1", help="region (default us-east-1)")
    up.add_argument(
        "--load-managers",
        type=int,
        default=2,
        metavar="N",
        help="load manager replicas, one active (placement, failover, drain, moves; default: 2; "
        "0: lookups place topics themselves)",
    )
    up.add_argument(
        "--workdir", type=Path, default=Path(".danube-local"), metavar="DIR",
        help="etcd data, logs and ready files (default: ./.danube-local)",
    )  # fmt: skip
    up.add_argument(
        "--cluster", default="danube", metavar="NAME", help="cluster name = etcd key root (default: danube)"
    )
    up.add_argument(
        "--etcd-endpoint", metavar="HOST:PORT",
        help="use this running etcd instead of starting one",
    )  # fmt: skip
    up.add_argument(
        "--lookup-port", type=_port, default=6650, metavar="PORT", help="client port (default: 6650)"
    )
    up.add_argument(
        "--admin-port", type=_port, default=50051, metavar="PORT", help="admin port (default: 50051)"
    )
    up.add_argument(
        "--console-port",
        type=_port,
        default=8080,
        metavar="PORT",
        help="the lookup's HTTP port: web console and its /metrics (default: 8080; every other "
        "service's /metrics gets a free port, printed once started)",
    )
    up.add_argument(
        "--broker-ports", type=_ports, default=None, metavar="P1,P2,...",
        help="ports of the brokers, in order (default: any free port)",
    )  # fmt: skip
    up.add_argument(
        "--host", default="127.0.0.1", help="address every service listens on (default: 127.0.0.1)"
    )
    up.add_argument("--lookup-config", type=Path, metavar="FILE", help="YAML config for the lookup service")
    up.add_argument("--broker-config", type=Path, metavar="FILE", help="YAML config for every broker")
    up.add_argument(
        "--secure",
        action="store_true",
        help="TLS on every server, mTLS between services, JWT authentication and default-deny RBAC on "
        "every call; makes (once) a CA, certificates and a JWT secret in WORKDIR/secure/, writes an "
        "admin token there and prints how to use them (docs/security.md)",
    )
    up.add_argument(
        "--traces",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="every service exports OpenTelemetry traces to a trace sink run by danube-local (spans kept in "
        "WORKDIR/traces/spans.jsonl; `danube-local traces` prints them); --no-traces: tracing off",
    )
    up.add_argument(
        "--traces-port", type=_port, default=4317, metavar="PORT",
        help="the trace sink's OTLP/gRPC port (default: 4317, OTLP's own; 0 = any free port)",
    )  # fmt: skip
    up.add_argument(
        "--otlp-endpoint", metavar="URL",
        help="export traces to this OTLP/gRPC collector instead of the built-in sink (e.g. a Jaeger "
        "all-in-one at http://127.0.0.1:4317)",
    )  # fmt: skip
    up.add_argument(
        "--demo", action="store_true", help="once started, produce and consume 10 messages with the SDK"
    )
    up.add_argument(
        "--exit-after-demo", action="store_true",
        help="stop after the demo (implies --demo); exit code 0 only if the demo succeeded",
    )  # fmt: skip
    up.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper,
        help="log level of every service (default: INFO)",
    )  # fmt: skip
    up.add_argument(
        "--no-restart", dest="restart", action="store_false",
        help="leave a service that exits stopped (default: start it again, with a back-off growing from "
        "1 s to 30 s while it keeps failing; a broker stops itself when etcd was unreachable for a whole "
        "lease TTL)",
    )  # fmt: skip
    up.add_argument("--start-timeout", type=float, default=60.0, metavar="SECONDS", help=argparse.SUPPRESS)

    certs = sub.add_parser(
        "certs",
        help="write the CA, certificates, JWT secret and admin token of a secured deployment into a directory",
        description="Write (or keep, when still good) the security files of a secured deployment into DIR: "
        "a CA, one certificate per service, a client certificate, the JWT secret and a super admin token. "
        "For services run elsewhere, e.g. in containers (deploy/docker-compose.secure.yml).",
        epilog=CERTS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    certs.add_argument(
        "--dir", type=Path, required=True, metavar="DIR", help="where the files go (made if missing)"
    )
    certs.add_argument(
        "--service",
        type=_service_spec,
        action="append",
        default=[],
        metavar="IDENTITY[=HOST,HOST...]",
        help="a service certificate: its name (common name, matched by auth.internal_identities) and the "
        "hosts it is dialed at (default: IDENTITY); localhost and 127.0.0.1 are always added. Repeat it",
    )
    certs.add_argument(
        "--admin-token-ttl",
        type=_duration,
        default=TOKEN_TTL_S,
        metavar="DURATION",
        help="how long admin.jwt is valid: 30m, 12h, 30d, 8760h ... (default 30d)",
    )
    certs.add_argument(
        "--owner",
        metavar="USER[:GROUP]",
        help="give the directory and every file to this user (and its group, or GROUP): the user the "
        "services run as, when this runs as root (the image's user is danube)",
    )
    add_traces_parser(sub)
    return parser


def _say(msg: str) -> None:
    print(msg, flush=True)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def endpoints_table(cluster: LocalCluster) -> str:
    rows: list[tuple[str, str, str, str, str]] = []
    if cluster.etcd is not None and cluster.etcd.proc is not None:
        rows.append(
            ("etcd", cluster.etcd_endpoint, str(cluster.etcd.proc.pid), _rel(cluster.etcd.log_path), "")
        )
    else:
        rows.append(("etcd", cluster.etcd_endpoint, "-", "(external)", ""))
    lk = cluster.lookup
    rows.append(("lookup (service URL)", lk.url, str(lk.pid), _rel(lk.log_path), lk.metrics_url))
    rows.append(("admin", lk.admin_url, str(lk.pid), "(served by lookup)", ""))
    if lk.http_url:
        rows.append(("web console", lk.http_url, str(lk.pid), "(served by lookup)", ""))
    for b in cluster.brokers:
        rows.append((f"broker {b.broker_id}", b.url, str(b.pid), _rel(b.log_path), b.metrics_url))
    for svc in [*cluster.leaders, *cluster.load_managers, *cluster.uploaders.values()]:
        rows.append((svc.name, svc.url, str(svc.pid), _rel(svc.log_path), svc.metrics_url))
    if cluster.planner is not None:
        p = cluster.planner
        rows.append(
            ("planner", f"engine {p.info.get('engine')}", str(p.pid), _rel(p.log_path), p.metrics_url)
        )
    head = ("component", "address", "pid", "log", "metrics")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    lines = [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]
    ]
    return "\n".join(lines)


def next_steps(cluster: LocalCluster) -> str:
    url, admin = cluster.service_url, cluster.admin_url
    return "\n".join(
        [
            "Next steps (in another terminal, after `source .venv/bin/activate`):",
            f"  danube-cli produce -s {url} -t /default/demo -m hello",
            f"  danube-cli consume -s {url} -t /default/demo -m my-sub",
            f"  danube-admin --admin-url {admin} topics list",
            f"  danube-admin --admin-url {admin} brokers list",
        ]
    )


def secure_steps(cluster: LocalCluster) -> str:
    """How to reach a secured cluster: the token, the TLS flags, CLI and SDK lines."""
    sec = cluster.security
    assert sec is not None
    url, admin = cluster.service_url, cluster.admin_url
    q = shlex.quote
    tls = f"--tls-ca {q(str(sec.ca_file))} --tls-cert {q(str(sec.client_cert))} --tls-key {q(str(sec.client_key))}"
    until = time.strftime("%Y-%m-%d", time.localtime(sec.expires_at))
    grants = ", ".join(f"{g.name}.jwt (role {g.role} on namespace default)" for g in DEMO_GRANTS)
    return "\n".join(
        [
            "Secured: TLS on every server, mTLS between services, JWT + RBAC on every call (docs/security.md).",
            f"  credentials: {sec.directory}/",
            "    ca.pem (the cluster's CA), admin.pem + admin.key (the client certificate every server asks for),",
            f"    admin.jwt (super admin {ADMIN_SUBJECT!r}, valid until {until}), {grants}",
            "Next steps (in another terminal, after `source .venv/bin/activate`):",
            f"  export DANUBE_TOKEN=$(cat {q(str(sec.admin_token_file))})",
            f"  danube-cli produce -s {url} {tls} -t /default/demo -m hello",
            f"  danube-cli consume -s {url} {tls} -t /default/demo -m my-sub",
            f"  danube-admin --admin-url {admin} {tls} topics list",
            f"  danube-admin --admin-url {admin} {tls} brokers list",
            f"  a narrower token: --token-file {q(str(sec.token_file(DEMO_PRODUCER.name)))} "
            "(may produce in namespace default, may not delete a topic)",
            "  in Python (danube_sdk):",
            f"    DanubeClient({url!r}, token=Path({str(sec.admin_token_file)!r}).read_text().strip(),",
            f"                 tls=TlsOptions(ca_file={str(sec.ca_file)!r},",
            f"                                cert_file={str(sec.client_cert)!r}, key_file={str(sec.client_key)!r}))",
        ]
    )


def demo_security(cluster: LocalCluster) -> DemoSecurity:
    """The demo's credentials on a secured cluster: TLS files and the two narrow tokens."""
    sec = cluster.security
    assert sec is not None
    return DemoSecurity(
        ca_file=sec.ca_file,
        cert_file=sec.client_cert,
        key_file=sec.client_key,
        producer_token=sec.token(DEMO_PRODUCER.name),
        consumer_token=sec.token(DEMO_CONSUMER.name),
        admin_url=cluster.admin_url,
        producer=DEMO_PRODUCER.principal,
        consumer=DEMO_CONSUMER.principal,
    )


def _raise_interrupt(signum: int, frame: types.FrameType | None) -> None:
    raise KeyboardInterrupt


def _watch_until_stopped(
    cluster: LocalCluster, stop: threading.Event, say: Callable[[str], None], *, restart: bool = True
) -> None:
    """Block until Ctrl-C/SIGTERM. A service that exits meanwhile is restarted (with a back-off:
    danube_local.supervise), or with ``restart=False`` reported once."""
    supervisor = Supervisor(cluster, say=say)
    reported: set[str] = set()
    while not stop.wait(1.0):
        if restart:
            supervisor.check()
            continue
        for svc in supervisor.exited():
            if svc.name not in reported:
                reported.add(svc.name)
                say(
                    f"warning: {svc.label} exited with code {svc.proc.returncode if svc.proc else '?'}; "
                    f"see {_rel(svc.log_path)}"
                )


def s3_settings(args: argparse.Namespace) -> dict[str, str] | None:
    """ObjectStoreConfig fields (environment form) for --s3-endpoint; None: the local directory."""
    if not args.s3_endpoint:
        return None
    store = {"BACKEND": "s3", "S3__BUCKET": args.s3_bucket, "S3__REGION": args.s3_region}
    if args.s3_endpoint != "aws":  # MinIO and other S3-compatible servers want path-style URLs
        store |= {"S3__ENDPOINT_URL": args.s3_endpoint, "S3__PATH_STYLE": "true", "S3__CREATE_BUCKET": "true"}
    return store


def cmd_up(args: argparse.Namespace, say: Callable[[str], None] = _say) -> int:
    if args.brokers < 1:
        say("danube-local: --brokers must be at least 1")
        return EXIT_USAGE
    if args.leaders < 0 or args.load_managers < 0:
        say("danube-local: --leaders and --load-managers must be 0 or more")
        return EXIT_USAGE
    if args.planner and not args.leaders:
        say("danube-local: the planner needs the leader service: give --leaders 1 or more")
        return EXIT_USAGE
    if args.load_managers and not args.leaders:
        say(
            "danube-local: load managers need the leader service: give --leaders 1 or more (or --load-managers 0)"
        )
        return EXIT_USAGE
    if args.broker_ports is not None and len(args.broker_ports) != args.brokers:
        say(
            f"danube-local: --broker-ports lists {len(args.broker_ports)} port(s) for {args.brokers} broker(s)"
        )
        return EXIT_USAGE
    if args.etcd_endpoint is None and shutil.which("etcd") is None:
        say(
            "danube-local: etcd is not installed. Run ./quickstart.sh (it installs everything), "
            "or install it yourself with `sudo apt-get install etcd-server`, "
            "or point at a running etcd with --etcd-endpoint HOST:PORT."
        )
        return EXIT_FAILED
    demo = args.demo or args.exit_after_demo
    # The demo's SDK talks gRPC to loopback in this process: keep any configured proxy out of it.
    env = dict(os.environ)
    loopback_no_proxy(env, ["127.0.0.1", "localhost", args.host])
    os.environ.update({k: env[k] for k in ("no_proxy", "NO_PROXY")})

    tracing: LocalTracing | None = None
    if args.traces:
        # A collector named in the environment is where the services export, as --otlp-endpoint.
        endpoint = args.otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
        tracing = LocalTracing(workdir=args.workdir, port=args.traces_port, endpoint=endpoint)
        try:
            tracing.start()
        except OSError as exc:
            say(f"danube-local: {exc}")
            return EXIT_FAILED
    cluster = LocalCluster(
        brokers=args.brokers,
        leaders=args.leaders,
        load_managers=args.load_managers,
        uploaders=args.uploaders,
        object_store=s3_settings(args),
        planner=args.planner,
        workdir=args.workdir,
        cluster=args.cluster,
        etcd_endpoint=args.etcd_endpoint,
        lookup_port=args.lookup_port,
        admin_port=args.admin_port,
        console_port=args.console_port,
        broker_ports=args.broker_ports,
        host=args.host,
        log_level=args.log_level,
        lookup_config=args.lookup_config,
        broker_config=args.broker_config,
        progress=lambda m: say(f"  {m}"),
        secure=args.secure,
        extra_env=tracing.env() if tracing is not None else None,
    )
    # Installed explicitly: a parent that ignores SIGINT (a background job of a script) would
    # otherwise leave Python without its KeyboardInterrupt handler, and Ctrl-C would do nothing.
    previous_int = signal.signal(signal.SIGINT, _raise_interrupt)
    previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        say(f"danube-local: starting cluster {args.cluster!r} in {_rel(cluster.workdir)}")
        try:
            cluster.start(timeout_s=args.start_timeout)
        except ClusterError as exc:
            say(f"danube-local: the cluster did not start:\n{exc}")
            return EXIT_FAILED
        except RuntimeError as exc:  # etcd failed to start (its own message names its log)
            say(f"danube-local: the cluster did not start: {exc}")
            return EXIT_FAILED
        say("")
        say(f"Danube cluster {args.cluster!r} is up:")
        say(endpoints_table(cluster))
        say(f"  logs: {_rel(cluster.log_dir)}/")
        say("")
        say(secure_steps(cluster) if cluster.security is not None else next_steps(cluster))
        say("")
        if tracing is not None:
            say(tracing.steps())
            say("")
        if demo:
            from danube_local.demo import DEFAULT_TOPIC, run_demo_sync

            security = demo_security(cluster) if cluster.security is not None else None
            flush = trace_demo_client(tracing) if tracing is not None else None
            ok = run_demo_sync(cluster.service_url, out=say, security=security)
            if ok and tracing is not None and flush is not None:
                show_demo_trace(tracing, flush, DEFAULT_TOPIC, say)
            if args.exit_after_demo:
                say("danube-local: stopping (--exit-after-demo)")
                return EXIT_OK if ok else EXIT_FAILED
            say("")
        say(
            "Press Ctrl-C to stop the cluster."
            + (" A service that exits is started again." if args.restart else "")
        )
        _watch_until_stopped(cluster, threading.Event(), say, restart=args.restart)
        return EXIT_OK  # not reached: only an interrupt ends the wait
    except KeyboardInterrupt:
        say("\ndanube-local: stopping")
        return EXIT_OK
    finally:
        # A second Ctrl-C must not abandon the children half-way through stopping.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            cluster.stop()
            if tracing is not None:
                tracing.stop()
        finally:
            signal.signal(signal.SIGINT, previous_int)
            signal.signal(signal.SIGTERM, previous_term)


def cmd_certs(args: argparse.Namespace, say: Callable[[str], None] = _say) -> int:
    try:
        owner = owner_ids(args.owner) if args.owner else None
        files = DeploymentFiles(Path(args.dir), tuple(args.service))
    except ValueError as exc:
        say(f"danube-local certs: {exc}")
        return EXIT_USAGE
    try:
        outcomes = write_deployment_files(files, admin_token_ttl_s=args.admin_token_ttl, owner=owner)
    except PermissionError as exc:
        hint = " (--owner needs root)" if owner is not None and os.geteuid() != 0 else ""
        say(f"danube-local certs: cannot write {files.directory}: {exc}{hint}")
        return EXIT_FAILED
    except (OSError, ValueError, ConfigError) as exc:
        say(f"danube-local certs: cannot write {files.directory}: {exc}")
        return EXIT_FAILED
    say(f"danube-local certs: {files.directory}")
    width = max(len(o.name) for o in outcomes)
    for o in outcomes:
        say(f"  {o.name.ljust(width)}  {'made' if o.made else 'kept'}: {o.what}")
    if owner is not None:
        say(f"  owner: uid {owner[0]}, gid {owner[1]}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "up":
        return cmd_up(args)
    if args.command == "certs":
        return cmd_certs(args)
    if args.command == "traces":
        return cmd_traces(args, _say)
    parser.print_help()
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
