"""Layered configuration: defaults < YAML file < environment < command-line flags.

Each service declares one frozen pydantic model (fields name their units). ``load_config``
merges the layers and validates once, so a bad value fails at start-up with the field path:

- YAML: a mapping shaped like the model (nested sections are nested mappings).
- Environment: ``{PREFIX}_{FIELD}`` for top-level fields and ``{PREFIX}_{SECTION}__{FIELD}``
  for nested ones, e.g. ``DANUBE_BROKER_ETCD__ENDPOINTS=127.0.0.1:2379`` (lists: commas).
- Flags: a mapping of dotted paths to values; ``None`` means "flag not given".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from danube_common.errors import ConfigError

T = TypeVar("T", bound=BaseModel)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EtcdConfig(Frozen):
    """Where etcd is and how to reach it. Plaintext by default; TLS when ``ca_file`` or
    ``cert_file`` is set or an endpoint is written ``https://host:port``. The files are read
    and checked at start-up (a missing or bad one: the process refuses to start, exit 2)."""

    #: host:port of each etcd member (``https://host:port`` also turns TLS on).
    endpoints: list[str] = Field(default_factory=lambda: ["127.0.0.1:2379"])
    #: Root of every key of this cluster: /{cluster}/...
    cluster: str = "danube"
    request_timeout_s: float = 5.0
    #: How long a process waits for etcd at start-up before giving up.
    connect_timeout_s: float = 15.0
    #: TLS: PEM CA bundle that signed etcd's server certificate. Unset with TLS on: the
    #: system's roots.
    ca_file: str | None = None
    #: TLS client certificate (PEM) presented to etcd, for etcd's ``--client-cert-auth``;
    #: with ``key_file`` (unencrypted PEM key). Both or neither.
    cert_file: str | None = None
    key_file: str | None = None
    #: TLS: the name etcd's certificates are checked against instead of the endpoint's host.
    #: Needed with several endpoints (gRPC checks one name for all members: give a DNS name
    #: or IP that every member's certificate carries among its subject alternative names).
    server_name: str | None = None

    @model_validator(mode="after")
    def _tls_consistent(self) -> EtcdConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                "etcd.cert_file and etcd.key_file go together: set both (a client certificate for etcd) "
                "or neither"
            )
        if self.tls_enabled:
            plain = [e for e in self.endpoints if e.startswith("http://")]
            if plain:
                raise ValueError(
                    f"etcd endpoint {plain[0]!r} is http:// but etcd TLS is configured (etcd.ca_file, "
                    "etcd.cert_file or an https:// endpoint): write the endpoints as host:port or https://host:port"
                )
            if len(self.endpoints) > 1 and not self.server_name:
                raise ValueError(
                    "etcd TLS with several endpoints needs etcd.server_name: a DNS name (or IP) that every "
                    "member's certificate carries among its subject alternative names (gRPC checks one "
                    "name for all members)"
                )
        elif self.server_name:
            raise ValueError(
                "etcd.server_name is a TLS setting: set etcd.ca_file too (or https:// endpoints)"
            )
        return self

    @property
    def tls_enabled(self) -> bool:
        """TLS to etcd: a CA or a client certificate is set, or an endpoint says https://."""
        return bool(self.ca_file or self.cert_file) or any(e.startswith("https://") for e in self.endpoints)


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _set_path(d: dict[str, Any], path: list[str], value: Any) -> None:
    for p in path[:-1]:
        d = d.setdefault(p, {})
    d[path[-1]] = value


def split_list(raw: str | None) -> list[str] | None:
    """A comma-separated flag or environment value as a list (blanks dropped); None stays None."""
    return None if raw is None else [x.strip() for x in raw.split(",") if x.strip()]


def _env_layer(model: type[BaseModel], prefix: str, env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    start = prefix.upper() + "_"
    for name, raw in env.items():
        if not name.startswith(start):
            continue
        path = [p.lower() for p in name[len(start) :].split("__")]
        value: Any = raw
        field = _field_annotation(model, path)
        if field is not None and "list" in str(field):
            value = split_list(raw)
        _set_path(out, path, value)
    return out


def _field_annotation(model: type[BaseModel], path: list[str]) -> Any:
    cur: Any = model
    ann: Any = None
    for p in path:
        fields = getattr(cur, "model_fields", None)
        if not fields or p not in fields:
            return None
        ann = fields[p].annotation
        cur = ann
    return ann


def load_config(
    model: type[T],
    *,
    yaml_path: str | Path | None = None,
    env_prefix: str,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> T:
    data: dict[str, Any] = {}
    if yaml_path:
        try:
            loaded = yaml.safe_load(Path(yaml_path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config file {yaml_path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {yaml_path} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {yaml_path} must hold a mapping at the top level")
        data = _deep_merge(data, loaded)
    data = _deep_merge(data, _env_layer(model, env_prefix, os.environ if env is None else env))
    for dotted, value in (flags or {}).items():
        if value is not None:
            _set_path(data, dotted.split("."), value)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from exc
