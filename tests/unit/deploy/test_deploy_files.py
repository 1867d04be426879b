"""The deployment files stay consistent with the services: example configs load, compose is sane.

The compose file cannot be run here (no Docker engine); these checks catch what can be seen
without one: flags the services accept, unique broker ids and ports, published = listened ports.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from danube_common.config import load_config

pytestmark = pytest.mark.unit

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def _model(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"{module}.{name} is not importable yet: {exc}")


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
    cls = _model(module, model)
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


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return data


def flags(command: list[str]) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in command[1:])


def test_compose_has_every_component() -> None:
    services = compose()["services"]
    for name in ("etcd", "minio", "otel-collector", "jaeger", "lookup", "broker1", "broker2", "broker3"):
        assert name in services
    for name in ("lookup", "broker1", "broker2", "broker3"):
        svc = services[name]
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
        assert svc["depends_on"]["etcd"]["condition"] == "service_healthy"
        assert "/run/danube/ready.json" in svc["healthcheck"]["test"]


def test_compose_commands_follow_the_service_contract() -> None:
    services = compose()["services"]
    lookup = flags(services["lookup"]["command"])
    assert services["lookup"]["command"][0] == "danube-lookup"
    assert {"listen", "admin-listen", "etcd-endpoints", "cluster", "ready-file"} <= set(lookup)
    brokers = {n: s for n, s in services.items() if n.startswith("broker")}
    ids, ports = set(), set()
    for name, svc in brokers.items():
        assert svc["command"][0] == "danube-broker"
        f = flags(svc["command"])
        assert {"broker-id", "listen", "advertised-host", "etcd-endpoints", "cluster", "ready-file"} <= set(f)
        assert f["cluster"] == lookup["cluster"] and f["etcd-endpoints"] == lookup["etcd-endpoints"]
        port = f["listen"].rsplit(":", 1)[1]
        assert svc["ports"] == [f"{port}:{port}"], f"{name}: publish the port it listens on, 1:1"
        ids.add(f["broker-id"])
        ports.add(port)
        cfg = f["config"].removeprefix("/etc/danube/")
        assert (DEPLOY / "config" / cfg).exists()
    assert len(ids) == len(ports) == len(brokers) == 3


def test_compose_runs_the_control_plane() -> None:
    services = compose()["services"]
    leaders = {n: s for n, s in services.items() if s.get("command", [""])[0] == "danube-leader"}
    managers = {n: s for n, s in services.items() if s.get("command", [""])[0] == "danube-load-manager"}
    assert len(leaders) == 2 and len(managers) == 2
    leader_addrs = {f"{n}:{flags(s['command'])['listen'].rsplit(':', 1)[1]}" for n, s in leaders.items()}
    ids = set()
    for svc in managers.values():
        f = flags(svc["command"])
        assert set(f["leader-endpoints"].split(",")) == leader_addrs
        assert f["cluster"] == "danube" and f["etcd-endpoints"] == "etcd:2379"
        assert (DEPLOY / "config" / f["config"].removeprefix("/etc/danube/")).exists()
        ids.add(f["candidate-id"])
    assert len(ids) == 2, "each load manager campaigns under its own name"


def test_dockerfile_base_and_install() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert "pip install ." in text
    assert "COPY deploy/config /etc/danube" in text


def test_compose_gives_each_broker_a_wal_uploader_on_its_volume() -> None:
    services = compose()["services"]
    for i in ("1", "2", "3"):
        broker, uploader = services[f"broker{i}"], services[f"wal-uploader{i}"]
        f = flags(uploader["command"])
        assert uploader["command"][0] == "danube-wal-uploader" and f["broker-id"] == i
        assert uploader["volumes"] == broker["volumes"], "the uploader reads its broker's data directory"
        assert f["data-dir"] == broker["environment"]["DANUBE_BROKER_DATA_DIR"]
        assert (
            broker["environment"]["DANUBE_BROKER_UPLOADER_ADDR"]
            == f"wal-uploader{i}:{f['listen'].rsplit(':', 1)[1]}"
        )
        b_store = {
            k.split("OBJECT_STORE__")[1]: v for k, v in broker["environment"].items() if "OBJECT_STORE__" in k
        }
        u_store = {
            k.split("OBJECT_STORE__")[1]: v
            for k, v in uploader["environment"].items()
            if "OBJECT_STORE__" in k
        }
        assert b_store == u_store and b_store["BACKEND"] == "s3", "both sides use the same bucket"
