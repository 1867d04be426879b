"""The deployment files agree with the code, checked without Docker.

Every Danube service of deploy/docker-compose.yml, and of the same file with its overrides on
top (deploy/docker-compose.test.yml; docker-compose.secure.yml; all four files, as the secure
compose test runs them), is loaded the way the service loads itself: its
command through the service's own argparse parser and ``load()``, its environment through the
service's pydantic config (unknown fields are an error there), its ``--config`` file from
deploy/config. So a renamed flag, a misspelt or renamed environment variable, a bad value or a
missing config file fails here. Then the addresses are cross-checked against the loaded
configs: published ports = listened ports, every etcd / leader / uploader / S3 address names a
service of the file and the port it listens on, broker ids and ports are unique, health checks
watch the ready file the service writes. The Dockerfiles: EXPOSE = the services' default
ports, every package root is copied, the moto version matches the dev extra. The secure
override: each service's TLS, auth and etcd settings are what ``danube-local up --secure`` gives
a service of its kind (secure_mode.service_settings), every file it names is one the ``certs``
service's command writes, each certificate names the hosts its service is dialed at and matches
``auth.internal_identities``, every service waits for ``certs`` and mounts its volume read-only,
and etcd's own flags are etcd's (checked against ``etcd --help`` where etcd is installed).
Observability: every Danube service serves its HTTP endpoint (the port deploy/config shows),
Prometheus's targets (prometheus.yml; prometheus.secure.yml with HTTPS and a token the `certs`
service writes) are exactly those endpoints, every service exports traces to the collector's
OTLP port under its own service name (off in the test overrides), the collector hands them to
Jaeger, and Grafana's provisioned dashboard reads the provisioned Prometheus and uses only
metrics that metric_names.py defines.

The compose files are also run for real, in Docker, by tests/e2e/test_compose.py
(scripts/compose_test.sh).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import re
import shutil
import subprocess
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic import BaseModel

from danube_common.config import load_config
from danube_common.errors import ConfigError
from danube_common.observability.metric_names import ALL
from danube_common.observability.tracing import ExporterChoice, exporter_from_env
from danube_local import __main__ as local_main
from danube_local.certs import DeploymentFiles, ServiceSpec
from danube_local.secure_mode import ENV_PREFIXES, INTERNAL_IDENTITIES, as_env, service_settings
from tests.support import containers
from tests.support.compose import PORT_VARS, SECURE_PORT_VARS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Console script -> "module:function", from pyproject.toml.
SCRIPTS: dict[str, str] = PYPROJECT["project"]["scripts"]
#: The image's copy of deploy/config (deploy/Dockerfile: COPY deploy/config /etc/danube).
IMAGE_CONFIG_DIR = "/etc/danube/"

#: Values for the test overrides' variables (the compose test picks free ports).
TEST_ENV = {
    f"DANUBE_TEST_{name}_PORT": str(20000 + i) for i, name in enumerate((*PORT_VARS, *SECURE_PORT_VARS))
}
#: Console scripts that are tools, not services (the secure override's `certs` runs danube-local).
TOOL_SCRIPTS = frozenset({"danube-local", "danube-cli", "danube-admin"})


# ---- the files, as compose reads them ----------------------------------------------------------

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's variable substitution: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        have = env.get(name)
        if op in (":?", "?"):
            if have is None or (op == ":?" and have == ""):
                raise AssertionError(f"variable {name} is required: {arg}")
            return have
        if op == ":-":
            return have if have else arg
        if op == "-":
            return have if have is not None else arg
        assert name in env, f"variable {name} is used but not set (compose would substitute '')"
        return env[name]

    return _VAR.sub(sub, value)


def _merge_service(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """How compose merges an override into a service: scalars and commands are replaced,
    environment, labels and depends_on are merged by key, ports are concatenated, volumes are
    merged by their path in the container."""
    out = dict(base)
    for key, value in over.items():
        if key in ("environment", "labels", "depends_on") and isinstance(value, dict):
            out[key] = {**base.get(key, {}), **value}
        elif key == "ports":
            out[key] = [*base.get(key, []), *value]
        elif key == "volumes":
            targets = {str(v).split(":")[1] for v in value}
            out[key] = [*(v for v in base.get(key, []) if str(v).split(":")[1] not in targets), *value]
        elif key == "healthcheck":
            out[key] = {**base.get(key, {}), **value}
        else:
            out[key] = value
    return out


def raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / name).read_text())
    return data


def user_file() -> dict[str, Any]:
    """docker-compose.yml as a user runs it (no variables set)."""
    data: dict[str, Any] = interpolate(raw("docker-compose.yml"), {})
    return data


def merged(names: tuple[str, ...], env: Mapping[str, str], *, new: tuple[str, ...] = ()) -> dict[str, Any]:
    """``names`` merged in order as compose does; only the files in ``new`` may add services."""
    config: dict[str, Any] = interpolate(raw(names[0]), env)
    for name in names[1:]:
        over = interpolate(raw(name), env)
        services = dict(config["services"])
        for service, svc in over["services"].items():
            if service in services:
                services[service] = _merge_service(services[service], svc)
            else:
                assert name in new, f"{name} overrides {service}, which the files before it lack"
                services[service] = svc
        config = {
            **config,
            "services": services,
            "volumes": {**(config.get("volumes") or {}), **(over.get("volumes") or {})},
        }
    return config


def override_file() -> dict[str, Any]:
    """docker-compose.yml + docker-compose.test.yml, as the compose test runs them."""
    return merged(("docker-compose.yml", "docker-compose.test.yml"), TEST_ENV)


SECURE = "docker-compose.secure.yml"


def secure_file() -> dict[str, Any]:
    """docker-compose.yml + docker-compose.secure.yml, as a user runs them (no variables set)."""
    return merged(("docker-compose.yml", SECURE), {}, new=(SECURE,))


def secure_test_file() -> dict[str, Any]:
    """All four files, in the order the secure compose test runs them (tests/support/compose.py)."""
    names = ("docker-compose.yml", "docker-compose.test.yml", SECURE, "docker-compose.secure-test.yml")
    return merged(names, TEST_ENV, new=(SECURE,))


FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "user": user_file,
    "test": override_file,
    "secure": secure_file,
    "secure-test": secure_test_file,
}
#: The files that run on the host network of docker-compose.test.yml.
ON_HOST_NETWORK = ("test", "secure-test")


# ---- the services, as they load themselves -----------------------------------------------------


def main_module(script: str) -> ModuleType:
    module = SCRIPTS[script].split(":", 1)[0]
    return importlib.import_module(module)


def danube_services(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services whose command is one of this project's services (not a tool)."""
    return {
        n: s
        for n, s in config["services"].items()
        if s.get("command") and s["command"][0] in SCRIPTS and s["command"][0] not in TOOL_SCRIPTS
    }


def host_path(path: str) -> str:
    assert path.startswith(IMAGE_CONFIG_DIR), f"{path}: configs live in {IMAGE_CONFIG_DIR} in the image"
    local = DEPLOY / "config" / path.removeprefix(IMAGE_CONFIG_DIR)
    assert local.is_file(), f"{path}: no such file in deploy/config (the image has only those)"
    return str(local)


def option_strings(module: ModuleType) -> set[str]:
    return {opt for action in module.build_parser()._actions for opt in action.option_strings}


def model_of(module: ModuleType) -> type[BaseModel]:
    """The service's config model: what its ``load`` returns (danube-planner: the first item)."""
    ret = typing.get_type_hints(module.load)["return"]
    model = typing.get_args(ret)[0] if typing.get_origin(ret) is tuple else ret
    assert issubclass(model, BaseModel), ret
    return model


def local_argv(argv: list[str]) -> list[str]:
    """``argv`` with ``--config=/etc/danube/X`` pointing at deploy/config/X."""
    return [f"--config={host_path(a.split('=', 1)[1])}" if a.startswith("--config=") else a for a in argv]


def load_service(module: ModuleType, argv: list[str], env: Mapping[str, str]) -> Any:
    """The service's own ``load(argv, env=...)``: argparse, then every config layer."""
    argv = local_argv(argv)
    try:
        result = module.load(argv, env=dict(env))
    except SystemExit as exc:  # argparse refused a flag or a value
        raise AssertionError(f"{module.__name__}: argparse refused {argv} (exit {exc.code})") from exc
    return result[0] if isinstance(result, tuple) else result  # danube-planner: (cfg, once)


def env_field(model: type[BaseModel], prefix: str, name: str) -> list[str]:
    """The field path an environment variable sets; fails naming what is allowed."""
    assert name.startswith(prefix + "_"), (
        f"{name}: the service reads only {prefix}_* variables (the rest are ignored silently)"
    )
    path = [p.lower() for p in name[len(prefix) + 1 :].split("__")]
    cur: Any = model
    for i, part in enumerate(path):
        fields = getattr(cur, "model_fields", None) or {}
        assert part in fields, (
            f"{name}: {'.'.join(path[: i + 1])} is not a field of {getattr(cur, '__name__', cur)} "
            f"(fields: {', '.join(sorted(fields))})"
        )
        cur = _model_in(fields[part].annotation)
    return path


def _model_in(annotation: Any) -> Any:
    """The pydantic model in ``X | None`` (or the annotation itself)."""
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def loaded(config: dict[str, Any]) -> dict[str, Any]:
    """Every Danube service of ``config`` -> its loaded config object."""
    out = {}
    for name, svc in danube_services(config).items():
        env = {k: str(v) for k, v in (svc.get("environment") or {}).items()}
        out[name] = load_service(main_module(svc["command"][0]), [str(a) for a in svc["command"][1:]], env)
    return out


def port_of(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


def host_of(addr: str) -> str:
    return addr.rsplit(":", 1)[0]


# ---- example configs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "module", "model", "prefix"),
    [
        ("broker.yaml", "danube_broker.config", "BrokerConfig", "DANUBE_BROKER"),
        ("lookup.yaml", "danube_lookup.config", "LookupConfig", "DANUBE_LOOKUP"),
        ("leader.yaml", "danube_leader.config", "LeaderConfig", "DANUBE_LEADER"),
        ("load_manager.yaml", "danube_load_manager.config", "LoadManagerConfig", "DANUBE_LOAD_MANAGER"),
        ("wal_uploader.yaml", "danube_wal_uploader.config", "WalUploaderConfig", "DANUBE_WAL_UPLOADER"),
        ("planner.yaml", "danube_planner.config", "PlannerConfig", "DANUBE_PLANNER"),
    ],
)
def test_example_configs_load_and_document_every_field(
    file: str, module: str, model: str, prefix: str
) -> None:
    cls = getattr(importlib.import_module(module), model)
    path = DEPLOY / "config" / file
    cfg = load_config(cls, yaml_path=path, env_prefix=prefix, env={})
    defaults = cls()
    shown = yaml.safe_load(path.read_text())
    for key, value in shown.items():
        if key != "etcd":
            assert getattr(cfg, key) == getattr(defaults, key) == value, (
                f"{file}: {key} should show the default"
            )
    text = path.read_text()
    undocumented = [f for f in cls.model_fields if f"{f}:" not in text]
    assert not undocumented, f"{file} does not mention {undocumented}: document them (commented out is fine)"


# ---- every service loads as the code loads it ---------------------------------------------------


@pytest.mark.parametrize("which", FILES)
def test_every_service_flag_env_name_and_config_file_is_the_codes(which: str) -> None:
    config = FILES[which]()
    services = danube_services(config)
    assert services, "no Danube service found"
    for name, svc in services.items():
        module = main_module(svc["command"][0])
        known = option_strings(module)
        for arg in svc["command"][1:]:
            flag = str(arg).split("=", 1)[0]
            assert flag in known, (
                f"{which} {name}: {flag} is not a flag of {svc['command'][0]} ({sorted(known)})"
            )
        model = model_of(module)
        for env_name in svc.get("environment") or {}:
            if env_name.startswith("OTEL_"):  # OpenTelemetry's own (test_traces_... checks them)
                continue
            env_field(model, module.ENV_PREFIX, env_name)
        try:
            load_service(module, [str(a) for a in svc["command"][1:]], svc.get("environment") or {})
        except ConfigError as exc:
            raise AssertionError(
                f"{which} {name}: {svc['command'][0]} refuses its configuration: {exc}"
            ) from exc


def test_env_names_are_checked_against_the_model() -> None:
    # The check above has teeth: a misspelt field or a wrong prefix is caught.
    from danube_broker import __main__ as broker_main

    model = model_of(broker_main)
    assert env_field(model, "DANUBE_BROKER", "DANUBE_BROKER_OBJECT_STORE__S3__BUCKET") == [
        "object_store",
        "s3",
        "bucket",
    ]
    with pytest.raises(AssertionError, match="not a field"):
        env_field(model, "DANUBE_BROKER", "DANUBE_BROKER_OBJECT_STORE__S3__BUKET")
    with pytest.raises(AssertionError, match="reads only DANUBE_BROKER_"):
        env_field(model, "DANUBE_BROKER", "DANUBE_BROKR_DATA_DIR")


@pytest.mark.parametrize("which", FILES)
def test_health_checks_watch_the_ready_file(which: str) -> None:
    config = FILES[which]()
    for name, cfg in loaded(config).items():
        test = config["services"][name]["healthcheck"]["test"]
        assert cfg.ready_file and cfg.ready_file in test, (
            f"{which} {name}: {test} vs --ready-file {cfg.ready_file}"
        )


@pytest.mark.parametrize("which", FILES)
def test_every_address_names_a_service_and_the_port_it_listens_on(which: str) -> None:
    config = FILES[which]()
    services = config["services"]
    cfgs = loaded(config)
    test = which in ON_HOST_NETWORK

    def addr(service: str, port: int) -> str:
        # On the host network every service is 127.0.0.1; on compose's network, its name.
        return f"{'127.0.0.1' if test else service}:{port}"

    etcd_url = next(a for a in services["etcd"]["command"] if str(a).startswith("--listen-client-urls="))
    etcd = addr("etcd", urlsplit(etcd_url.split("=", 1)[1]).port or 0)
    s3_port = 9000 if not test else int(services["minio"]["command"][-1])
    by_kind: dict[str, dict[str, Any]] = {}
    for name, cfg in cfgs.items():
        by_kind.setdefault(services[name]["command"][0], {})[name] = cfg
        assert cfg.etcd.endpoints == [etcd], f"{which} {name}: etcd at {cfg.etcd.endpoints}, etcd is {etcd}"
        assert cfg.etcd.cluster == "danube", f"{which} {name}: cluster {cfg.etcd.cluster}"
        for dep in services[name].get("depends_on", {}):
            assert dep in services, f"{which} {name} depends on {dep}, which is not a service"
        assert "etcd" in services[name].get("depends_on", {}) or test, f"{name} starts before etcd is healthy"

    leaders = sorted(addr(n, port_of(c.listen_addr)) for n, c in by_kind["danube-leader"].items())
    assert len(leaders) == 2
    for kind in ("danube-load-manager", "danube-planner"):
        for name, cfg in by_kind[kind].items():
            assert sorted(cfg.leader_endpoints) == leaders, f"{which} {name}: {cfg.leader_endpoints}"

    brokers, uploaders = by_kind["danube-broker"], by_kind["danube-wal-uploader"]
    assert len(brokers) == len(uploaders) == 3
    assert len({c.broker_id for c in brokers.values()}) == 3, "broker ids are unique"
    uploader_of = {c.broker_id: (n, c) for n, c in uploaders.items()}
    for name, cfg in brokers.items():
        up_name, up = uploader_of[cfg.broker_id]
        assert cfg.uploader_addr == addr(up_name, port_of(up.listen_addr)), (
            f"{which} {name}: uploader address"
        )
        assert cfg.data_dir == up.data_dir, f"{which} {name}: the uploader serves the broker's data directory"
        if not test:
            assert services[name]["volumes"] == services[up_name]["volumes"], (
                f"{name}: same volume as {up_name}"
            )
        assert cfg.object_store == up.object_store, f"{which} {name}: broker and uploader use one bucket"
    for name, cfg in {**brokers, **uploaders, **by_kind["danube-planner"]}.items():
        store = cfg.object_store
        assert store.backend == "s3" and store.s3.endpoint_url == f"http://{addr('minio', s3_port)}", (
            f"{which} {name}: object store {store}"
        )
        assert store.s3.bucket == "danube-wal" and store.s3.path_style and store.s3.create_bucket


def test_user_file_publishes_the_ports_the_services_listen_on() -> None:
    config = user_file()
    services = config["services"]
    published: list[str] = []
    for name, cfg in loaded(config).items():
        listens = [cfg.listen_addr] if hasattr(cfg, "listen_addr") else []
        listens += [cfg.admin_listen_addr] if hasattr(cfg, "admin_listen_addr") else []
        if name == "lookup":  # its HTTP port too (/metrics; the web console)
            listens.append(cfg.http_listen_addr)
        ports = services[name].get("ports", [])
        if name.startswith("broker") or name == "lookup":
            assert sorted(ports) == sorted(f"{port_of(a)}:{port_of(a)}" for a in listens), (
                f"{name}: publish the ports it listens on, 1:1 (clients are sent to host:port)"
            )
        else:
            assert not ports, f"{name} is internal: publish nothing"
        for a in [*listens, cfg.http_listen_addr]:
            assert host_of(a) == "0.0.0.0", f"{name}: listen on every interface of the container"
        published += [p.split(":")[-1] for p in ports]
    assert len(published) == len(set(published)), "a host port is published twice"
    brokers = {n: c for n, c in loaded(config).items() if services[n]["command"][0] == "danube-broker"}
    for name, cfg in brokers.items():
        assert cfg.advertised_host == name, f"{name} advertises {cfg.advertised_host}"


def test_user_file_uses_the_default_ports_where_it_can() -> None:
    # One replica per container: each listens on its service's default port, except the
    # brokers, whose ports must differ (each is published 1:1 on the host).
    config = user_file()
    for name, cfg in loaded(config).items():
        if not hasattr(cfg, "listen_addr") or name.startswith("broker"):
            continue
        default = type(cfg).model_fields["listen_addr"].default
        assert port_of(cfg.listen_addr) == port_of(default), (
            f"{name}: listens on {cfg.listen_addr}, default {default}"
        )


#: The services of docker-compose.yml that watch the cluster: public images, which the compose
#: test cannot pull (its override keeps them out with a profile).
OBSERVERS = frozenset({"prometheus", "grafana", "otel-collector", "jaeger"})


def not_run(svc: dict[str, Any]) -> bool:
    """A service the compose test leaves out (a profile; tests/support/compose.py drops it)."""
    return bool(svc.get("profiles"))


def test_test_override_runs_everything_on_loopback_from_local_images() -> None:
    override = raw("docker-compose.test.yml")["services"]
    assert set(override) == set(raw("docker-compose.yml")["services"]), "the override covers every service"
    config = override_file()
    assert {n for n, svc in config["services"].items() if not_run(svc)} == OBSERVERS
    for name, svc in config["services"].items():
        if not_run(svc):
            continue
        assert svc.get("network_mode") == "host", f"{name}: host network (traffic stays on loopback)"
        assert svc.get("image") in (containers.PROJECT_IMAGE, *containers.SERVER_IMAGES), (
            f"{name}: {svc.get('image')} is not one of the locally built images"
        )
    listens: list[int] = []
    for name, cfg in loaded(config).items():
        for field in ("listen_addr", "admin_listen_addr", "http_listen_addr"):
            if hasattr(cfg, field):
                assert host_of(getattr(cfg, field)) == "127.0.0.1", f"{name}: {field} on loopback only"
                listens.append(port_of(getattr(cfg, field)))
        if hasattr(cfg, "advertised_host"):
            assert cfg.advertised_host == "127.0.0.1", name
    assert len(listens) == len(set(listens)), "two services listen on one port of the host network"
    used = set(re.findall(r"DANUBE_TEST_([A-Z0-9_]+)_PORT", (DEPLOY / "docker-compose.test.yml").read_text()))
    assert used == set(PORT_VARS), f"ports used {sorted(used)} vs picked by the test {sorted(PORT_VARS)}"


def test_planner_one_shot_command_loads() -> None:
    # The compose test runs the planner service's command with --once in a one-off container.
    from danube_planner import __main__ as planner_main

    for config in (user_file(), override_file()):
        svc = config["services"]["planner"]
        argv = [str(a) for a in svc["command"][1:] if not str(a).startswith("--ready-file")]
        cfg, once = planner_main.load([*local_argv(argv), "--once"], env=svc.get("environment") or {})
        assert once and cfg.engine == "spark" and cfg.leader_endpoints


# ---- the secure override -------------------------------------------------------------------------

SECURE_FILES = ("secure", "secure-test")
#: Where the `certs` service writes, and every other service mounts the volume (read-only).
SECURE_DIR = "/etc/danube/secure"
#: The config sections the secure override sets in every Danube service.
SECURITY_SECTIONS = ("TLS__", "AUTH__", "ETCD__")


def certs_args(config: dict[str, Any]) -> argparse.Namespace:
    """The `certs` service's command, parsed by danube-local's own parser."""
    command = [str(a) for a in config["services"]["certs"]["command"]]
    assert command[:2] == ["danube-local", "certs"], command
    try:
        return local_main.build_parser().parse_args(command[1:])
    except SystemExit as exc:
        raise AssertionError(f"danube-local refuses {command} (exit {exc.code})") from exc


def certs_layout(config: dict[str, Any]) -> DeploymentFiles:
    args = certs_args(config)
    return DeploymentFiles(Path(args.dir), tuple(args.service))


def cert_specs(config: dict[str, Any]) -> dict[str, ServiceSpec]:
    return {spec.identity: spec for spec in certs_layout(config).services}


def kind_of(script: str) -> str:
    """danube-load-manager -> load_manager (secure_mode's kinds)."""
    return script.removeprefix("danube-").replace("-", "_")


def identity_of(name: str, svc: dict[str, Any]) -> str:
    """The certificate a service presents: the file its TLS__CERT_FILE names."""
    prefix = main_module(svc["command"][0]).ENV_PREFIX
    cert = str((svc.get("environment") or {}).get(f"{prefix}_TLS__CERT_FILE", ""))
    assert cert.startswith(SECURE_DIR + "/") and cert.endswith(".pem"), f"{name}: TLS__CERT_FILE {cert!r}"
    return Path(cert).stem


def strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [str(value)]


def test_certs_service_writes_into_its_volume_as_the_images_user() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    image_user = re.search(r"^USER (\S+)$", dockerfile, re.M)
    assert image_user, "deploy/Dockerfile names the user services run as"
    assert re.search(rf"useradd .*\b{image_user.group(1)}\b", dockerfile), "the image makes that user"
    for which in SECURE_FILES:
        config = FILES[which]()
        certs = config["services"]["certs"]
        args = certs_args(config)
        assert str(args.dir) == SECURE_DIR, f"{which}: certs writes {args.dir}"
        assert args.owner == image_user.group(1), f"{which}: hand the files to the services' user"
        assert certs.get("user") == "root", (
            f"{which}: certs writes the volume's root, made by Docker for root"
        )
        assert certs.get("restart") == "no", f"{which}: certs runs once"
        assert "healthcheck" not in certs, f"{which}: a one-shot service (ComposeStack waits for its exit)"
        assert certs["volumes"] == [f"secure:{SECURE_DIR}"], f"{which}: certs writes the `secure` volume"
        assert "secure" in config["volumes"], f"{which}: the `secure` volume is declared"
        assert args.admin_token_ttl == 30 * 86400, f"{which}: the admin token's default ttl (30d)"


def test_every_service_waits_for_certs_and_mounts_them_read_only() -> None:
    for which in SECURE_FILES:
        config = FILES[which]()
        for name, svc in config["services"].items():
            # Not secured (deploy/docker-compose.secure.yml): MinIO, and the observers but Prometheus.
            if name in ("certs", "minio") or name in OBSERVERS - {"prometheus"}:
                continue
            assert svc.get("depends_on", {}).get("certs") == {
                "condition": "service_completed_successfully"
            }, f"{which} {name}: wait until certs exited 0"
            assert f"secure:{SECURE_DIR}:ro" in svc.get("volumes", []), (
                f"{which} {name}: mount the volume :ro"
            )


def test_secure_settings_are_those_of_danube_local_up_secure() -> None:
    # One source of truth: each service gets what `danube-local up --secure` gives a service of
    # its kind (TLS, auth, etcd TLS), with its own certificate of the `certs` service.
    for which in SECURE_FILES:
        config = FILES[which]()
        layout = certs_layout(config)
        specs = cert_specs(config)
        for name, svc in danube_services(config).items():
            module = main_module(svc["command"][0])
            kind = kind_of(svc["command"][0])
            assert ENV_PREFIXES[kind] == module.ENV_PREFIX, f"secure_mode's prefix of {kind}"
            identity = identity_of(name, svc)
            assert identity in specs, f"{which} {name}: no --service {identity} in the certs command"
            cert, key = layout.pair(identity)
            want = as_env(
                module.ENV_PREFIX,
                service_settings(
                    kind,
                    cert_file=cert,
                    key_file=key,
                    ca_file=layout.ca_cert,
                    secret_file=layout.jwt_secret,
                    etcd_tls=True,
                ),
            )
            have = {
                k: str(v)
                for k, v in (svc.get("environment") or {}).items()
                if k.removeprefix(module.ENV_PREFIX + "_").startswith(SECURITY_SECTIONS)
            }
            assert have == want, f"{which} {name}: security settings differ from secure_mode's"


def test_certificates_name_the_services_and_their_hosts() -> None:
    for which in SECURE_FILES:
        config = FILES[which]()
        services = config["services"]
        specs = cert_specs(config)
        cfgs = loaded(config)
        on_host = which in ON_HOST_NETWORK
        used = {identity_of(name, services[name]) for name in cfgs}
        assert set(specs) == used | {"etcd"}, f"{which}: a certificate per service, and etcd's"
        assert len(used) == len(cfgs), f"{which}: each service has a certificate of its own"
        for name, cfg in cfgs.items():
            identity = identity_of(name, services[name])
            assert any(fnmatch.fnmatchcase(identity, p) for p in INTERNAL_IDENTITIES), (
                f"{which} {name}: {identity} is no internal identity {INTERNAL_IDENTITIES}"
            )
            hosts = set(specs[identity].cert_hosts)
            # The host the other services and the clients dial: the service name on compose's
            # network, 127.0.0.1 on the host network.
            assert (name if not on_host else "127.0.0.1") in hosts, f"{which} {name}: {hosts}"
            for field in ("advertised_host", "internal_advertised_host"):
                if getattr(cfg, field, None):
                    assert getattr(cfg, field) in hosts, f"{which} {name}: {field} not in {hosts}"
            for endpoint in cfg.etcd.endpoints:
                assert host_of(endpoint.removeprefix("https://")) in specs["etcd"].cert_hosts, (
                    f"{which} {name}: etcd is dialed at {endpoint}"
                )
            assert cfg.tls.enabled and cfg.etcd.tls_enabled, f"{which} {name}: TLS, and TLS to etcd"
            if services[name]["command"][0] != "danube-planner":  # it serves nothing: no auth
                assert cfg.auth.enabled and cfg.auth.jwt is not None, f"{which} {name}: auth on"
        # Identities are matched against a certificate's names too (common name or SAN): etcd's
        # certificate, which is no cluster member, must not name one.
        etcd_names = specs["etcd"].cert_hosts
        assert not any(fnmatch.fnmatchcase(h, p) for h in etcd_names for p in INTERNAL_IDENTITIES), etcd_names
    # With DANUBE_ADVERTISED_HOST, the brokers' certificates name it too.
    config = interpolate(raw(SECURE), {"DANUBE_ADVERTISED_HOST": "10.0.0.5"})
    specs = {s.identity: s for s in certs_layout(config).services}
    assert all("10.0.0.5" in specs[f"broker-{n}"].hosts for n in (1, 2, 3))


def test_every_secure_file_named_is_one_certs_writes() -> None:
    for which in SECURE_FILES:
        config = FILES[which]()
        written = {str(p) for p in certs_layout(config).paths()}
        named = set()
        for name, svc in config["services"].items():
            for text in strings({k: v for k, v in svc.items() if k != "volumes"}):
                value = text.split("=", 1)[1] if text.startswith("--") and "=" in text else text
                if value.startswith(SECURE_DIR + "/"):
                    assert value in written, (
                        f"{which} {name}: {value} is not a file `danube-local certs` writes"
                    )
                    named.add(value)
        for must in ("ca.pem", "jwt-secret", "etcd.pem", "etcd.key"):
            assert f"{SECURE_DIR}/{must}" in named, f"{which}: {must} is used"


def test_secure_brokers_have_internal_listeners() -> None:
    for which in SECURE_FILES:
        config = FILES[which]()
        on_host = which in ON_HOST_NETWORK
        ports = []
        for name, cfg in loaded(config).items():
            if config["services"][name]["command"][0] != "danube-broker":
                continue
            assert cfg.internal_listen_addr, f"{which} {name}: services call brokers on an internal listener"
            assert host_of(cfg.internal_listen_addr) == ("127.0.0.1" if on_host else "0.0.0.0")
            assert cfg.internal_advertised_host == ("127.0.0.1" if on_host else name), (
                f"{which} {name}: the other services reach it there, whatever DANUBE_ADVERTISED_HOST says"
            )
            port = port_of(cfg.internal_listen_addr)
            assert port != port_of(cfg.listen_addr)
            published = [str(p).split(":")[-1] for p in config["services"][name].get("ports", [])]
            assert str(port) not in published, f"{which} {name}: the internal listener is not published"
            ports.append(port)
        assert len(ports) == len(set(ports)) == 3, f"{which}: internal ports {ports}"


def etcd_flags(binary: str) -> set[str] | None:
    """The flags ``binary --help`` lists (etcd and etcdctl print them there); None when the
    binary is not installed."""
    if shutil.which(binary) is None:
        return None
    res = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30, check=False)
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", res.stdout + res.stderr))


def test_secure_etcd_serves_tls_and_requires_client_certificates() -> None:
    for which in SECURE_FILES:
        etcd = FILES[which]()["services"]["etcd"]
        flags = dict(str(a).split("=", 1) if "=" in str(a) else (str(a), "") for a in etcd["command"][1:])
        for flag in ("--listen-client-urls", "--advertise-client-urls"):
            assert urlsplit(flags[flag]).scheme == "https", f"{which}: {flag}={flags[flag]}"
        assert flags["--cert-file"] == f"{SECURE_DIR}/etcd.pem"
        assert flags["--key-file"] == f"{SECURE_DIR}/etcd.key"
        assert flags["--trusted-ca-file"] == f"{SECURE_DIR}/ca.pem"
        assert "--client-cert-auth" in flags
        assert host_of(urlsplit(flags["--listen-peer-urls"]).netloc) == "127.0.0.1", (
            f"{which}: one member, the peer port on loopback only"
        )
        test = [str(a) for a in etcd["healthcheck"]["test"]]
        port = urlsplit(flags["--listen-client-urls"]).port
        assert f"--endpoints=https://127.0.0.1:{port}" in test, f"{which}: health check {test}"
        assert {f"--cacert={SECURE_DIR}/ca.pem", f"--cert={SECURE_DIR}/etcd.pem"} <= set(test)


def test_secure_etcd_flags_are_etcds() -> None:
    # Debian's etcd-server (3.4; the test image) and the compose file's 3.5 share these flags.
    known, ctl = etcd_flags("etcd"), etcd_flags("etcdctl")
    if known is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    for which in SECURE_FILES:
        etcd = FILES[which]()["services"]["etcd"]
        for arg in etcd["command"][1:]:
            flag = str(arg).split("=", 1)[0]
            assert flag in known, f"{which}: etcd has no flag {flag}"
        for arg in etcd["healthcheck"]["test"][2:]:
            if ctl is not None and str(arg).startswith("--"):
                assert str(arg).split("=", 1)[0] in ctl, f"{which}: etcdctl has no flag {arg}"


def test_secure_test_override_stays_on_loopback_with_local_images() -> None:
    config = secure_test_file()
    assert {n for n, svc in config["services"].items() if not_run(svc)} == OBSERVERS
    for name, svc in config["services"].items():
        if not_run(svc):
            continue
        assert svc.get("network_mode") == "host", f"{name}: host network"
        assert svc.get("image") in (containers.PROJECT_IMAGE, *containers.SERVER_IMAGES), (
            f"{name}: {svc.get('image')} is not one of the locally built images"
        )
    text = (DEPLOY / "docker-compose.secure-test.yml").read_text()
    used = set(re.findall(r"DANUBE_TEST_([A-Z0-9_]+)_PORT", text))
    assert used - set(PORT_VARS) == set(SECURE_PORT_VARS), (
        f"new port variables {sorted(used - set(PORT_VARS))}"
    )


# ---- images -------------------------------------------------------------------------------------


def dockerfile_arg(text: str, name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S+)$", text, re.M)
    assert m, f"no ARG {name}=... default"
    return m.group(1).strip('"')


def test_dockerfile_exposes_the_default_ports_and_copies_every_package() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert dockerfile_arg(text, "BASE_IMAGE") == "python:3.11-slim-bookworm", (
        "users build FROM the public image"
    )
    assert "COPY deploy/config /etc/danube" in text
    assert "pip install --no-deps ." in text
    # Without it the planner's Spark JVM launch fails at random (see the Dockerfile's comment).
    assert "ENV GRPC_ENABLE_FORK_SUPPORT=false" in text
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", text, re.M) for p in line.split()}
    defaults = set()
    for script in (
        "danube-lookup",
        "danube-broker",
        "danube-leader",
        "danube-load-manager",
        "danube-wal-uploader",
    ):
        model = model_of(main_module(script))
        for field in ("listen_addr", "admin_listen_addr"):
            if field in model.model_fields:
                defaults.add(port_of(model.model_fields[field].default))
    assert exposed == defaults, f"EXPOSE {sorted(exposed)} vs the services' default ports {sorted(defaults)}"
    roots = {Path(w).parts[0] for w in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"]}
    ignore = (ROOT / ".dockerignore").read_text().split()
    for root in roots:
        assert f"COPY {root} ./{root}" in text, f"deploy/Dockerfile does not copy {root}/"
        assert f"!{root}/" in ignore, f".dockerignore keeps {root}/ out of the build context"


def test_test_images_match_the_project() -> None:
    moto = (DEPLOY / "test" / "moto.Dockerfile").read_text()
    dev = PYPROJECT["project"]["optional-dependencies"]["dev"]
    assert dockerfile_arg(moto, "MOTO_REQUIREMENT") in dev, "moto image and dev extra ask for the same moto"
    planner = PYPROJECT["project"]["optional-dependencies"]["planner"]
    assert set(planner) <= set(dev), "the planner extra (installed in the image) is in the dev extra too"
    script = (ROOT / "scripts" / "compose_test.sh").read_text()
    for image in (containers.BASE_IMAGE, containers.PROJECT_IMAGE, *containers.SERVER_IMAGES):
        assert image in script, f"scripts/compose_test.sh does not build {image}"
    for dockerfile in ("etcd.Dockerfile", "moto.Dockerfile"):
        text = (DEPLOY / "test" / dockerfile).read_text()
        assert dockerfile_arg(text, "BASE_IMAGE") == containers.BASE_IMAGE


# ---- observability: metrics, Prometheus, Grafana, traces ----------------------------------------

#: The files that run Prometheus and the collector (the test overrides leave them out).
WATCHED = ("user", "secure")


def mounts(svc: dict[str, Any]) -> dict[str, str]:
    """Container path -> host path (relative to deploy/) of a service's bind mounts."""
    out = {}
    for v in svc.get("volumes", []):
        parts = str(v).split(":")
        out[parts[1]] = parts[0]
    return out


def deploy_yaml(path: str) -> Any:
    return yaml.safe_load((DEPLOY / path.removeprefix("./")).read_text())


def documented_http_port(script: str) -> int:
    """The port deploy/config/<service>.yaml shows (commented out) for http_listen_addr."""
    name = script.removeprefix("danube-").replace("-", "_")
    text = (DEPLOY / "config" / f"{name}.yaml").read_text()
    m = re.search(r"^# http_listen_addr: 0\.0\.0\.0:(\d+)$", text, re.M)
    assert m, f"deploy/config/{name}.yaml shows no http_listen_addr"
    return int(m.group(1))


@pytest.mark.parametrize("which", FILES)
def test_every_service_serves_its_http_endpoint(which: str) -> None:
    config = FILES[which]()
    on_host = which in ON_HOST_NETWORK
    for name, cfg in loaded(config).items():
        script = config["services"][name]["command"][0]
        assert cfg.http_listen_addr, f"{which} {name}: no --http-listen (Prometheus scrapes every service)"
        assert host_of(cfg.http_listen_addr) == ("127.0.0.1" if on_host else "0.0.0.0"), name
        if not on_host:
            assert port_of(cfg.http_listen_addr) == documented_http_port(script), (
                f"{which} {name}: the HTTP port deploy/config documents for {script}"
            )


@pytest.mark.parametrize("which", WATCHED)
def test_prometheus_scrapes_every_service(which: str) -> None:
    config = FILES[which]()
    services = config["services"]
    prom = services["prometheus"]
    config_file = mounts(prom)["/etc/prometheus/prometheus.yml"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    assert config_file == ("./prometheus.secure.yml" if which == "secure" else "./prometheus.yml")
    scrape = deploy_yaml(config_file)
    secure = which == "secure"
    want: dict[str, set[str]] = {}
    for name, cfg in loaded(config).items():
        job = services[name]["command"][0]
        want.setdefault(job, set()).add(f"{name}:{port_of(cfg.http_listen_addr)}")
        assert cfg.tls.enabled == secure, f"{which} {name}: HTTPS exactly when the stack is secured"
    have: dict[str, set[str]] = {}
    for job in scrape["scrape_configs"]:
        targets = {t for sc in job["static_configs"] for t in sc["targets"]}
        if job["job_name"] == "prometheus":
            assert targets == {"localhost:9090"}
            continue
        have[job["job_name"]] = targets
        if secure:
            assert job["scheme"] == "https", job["job_name"]
            ca, token = job["tls_config"]["ca_file"], job["authorization"]["credentials_file"]
            written = {str(p) for p in certs_layout(config).paths()}
            assert {ca, token} <= written, f"{job['job_name']}: {ca}, {token} are not files certs writes"
            assert token.endswith(".jwt") and ca.endswith("ca.pem")
        else:
            assert job.get("scheme", "http") == "http" and "authorization" not in job
    assert have == want, "prometheus targets = every Danube service's HTTP address, one job per kind"
    if secure:
        assert f"secure:{SECURE_DIR}:ro" in prom["volumes"] and prom.get("user") == "root"


def test_prometheus_configs_agree_but_for_tls_and_auth() -> None:
    plain, secure = deploy_yaml("prometheus.yml"), deploy_yaml("prometheus.secure.yml")

    def targets(doc: Any) -> dict[str, list[str]]:
        return {
            j["job_name"]: [t for sc in j["static_configs"] for t in sc["targets"]]
            for j in doc["scrape_configs"]
        }

    assert targets(plain) == targets(secure)
    assert plain["global"] == secure["global"]


def otel_collector(config: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    svc = config["services"]["otel-collector"]
    (flag,) = [a for a in svc["command"] if str(a).startswith("--config=")]
    path = flag.split("=", 1)[1]
    return svc, deploy_yaml(mounts(svc)[path])


@pytest.mark.parametrize("which", FILES)
def test_traces_go_to_the_collector_and_on_to_jaeger(which: str) -> None:
    config = FILES[which]()
    services = config["services"]
    cfgs = loaded(config)
    if which in ON_HOST_NETWORK:  # no collector runs there: tracing off, nothing to export to
        for name in cfgs:
            env = {k: str(v) for k, v in (services[name].get("environment") or {}).items()}
            assert exporter_from_env(env) is None, f"{which} {name}: tracing is off in the compose test"
        return
    _svc, collector = otel_collector(config)
    grpc_port = urlsplit("//" + collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]).port
    for name in cfgs:
        env = {k: str(v) for k, v in (services[name].get("environment") or {}).items()}
        assert exporter_from_env(env) == ExporterChoice("otlp", "grpc"), f"{which} {name}: {env}"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://otel-collector:{grpc_port}", name
        assert env["OTEL_SERVICE_NAME"] == services[name]["command"][0], f"{which} {name}: OTEL_SERVICE_NAME"
    pipeline = collector["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    (exporter,) = pipeline["exporters"]
    target = collector["exporters"][exporter]["endpoint"]
    assert host_of(target) == "jaeger" and port_of(target) == 4317, "Jaeger's OTLP gRPC port"
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert "jaeger" in services["otel-collector"]["depends_on"]


def dashboard_exprs(doc: Any) -> list[str]:
    out = []
    for panel in doc["panels"]:
        out += [t["expr"] for t in panel.get("targets", [])]
        for inner in panel.get("panels", []):
            out += [t["expr"] for t in inner.get("targets", [])]
    return out


def test_grafana_shows_the_dashboard_from_prometheus() -> None:
    config = user_file()
    grafana = config["services"]["grafana"]
    mounted = mounts(grafana)
    provisioning = DEPLOY / mounted["/etc/grafana/provisioning"].removeprefix("./")
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    prom_port = int(str(config["services"]["prometheus"]["ports"][0]).rsplit(":", 1)[1])  # in the container
    assert source["url"] == f"http://prometheus:{prom_port}" and source["type"] == "prometheus"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "danube.yml").read_text())["providers"]
    dashboards = DEPLOY / mounted[provider["options"]["path"]].removeprefix("./")
    files = sorted(dashboards.glob("*.json"))
    assert files, f"no dashboard in {dashboards}"
    known = set()
    for d in ALL:
        known.add(d.exposed)
        if d.kind == "histogram":
            known |= {f"{d.exposed}_bucket", f"{d.exposed}_sum", f"{d.exposed}_count"}
    for path in files:
        doc = json.loads(path.read_text())
        panels = [p for p in doc["panels"] if p["type"] != "row"]
        for panel in panels:
            assert panel["datasource"]["uid"] == source["uid"], f"{path.name}: {panel['title']}"
        used = {m for expr in dashboard_exprs(doc) for m in re.findall(r"\bdanube_[a-z0-9_]+", expr)}
        unknown = used - known
        assert not unknown, f"{path.name} uses metrics metric_names.py does not define: {sorted(unknown)}"
    # What the dashboard must show (the list).
    doc = json.loads((dashboards / "danube.json").read_text())
    text = "\n".join(dashboard_exprs(doc))
    for needed in (
        "danube_topic_messages_in_total",
        "danube_consumer_messages_out_total",
        "sum by (topic) (rate(danube_topic_messages_in_total",
        "histogram_quantile(0.5, sum by (le) (rate(danube_producer_send_latency_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(danube_producer_send_latency_seconds_bucket",
        "danube_subscription_lag_messages",
        "danube_wal_flush_latency_seconds_bucket",
        "danube_cloud_upload_total",
        "danube_cloud_upload_lag_bytes",
        "danube_leader_election_state",
        "danube_cluster_imbalance_cv",
    ):
        assert needed in text, f"the dashboard does not show {needed}"


def test_dashboard_metric_check_has_teeth() -> None:
    # A misspelt name in an expression is caught by the check above.
    doc = {
        "panels": [{"type": "timeseries", "targets": [{"expr": "rate(danube_topic_mesages_in_total[1m])"}]}]
    }
    used = {m for expr in dashboard_exprs(doc) for m in re.findall(r"\bdanube_[a-z0-9_]+", expr)}
    assert used - {d.exposed for d in ALL} == {"danube_topic_mesages_in_total"}
