"""Config layering: defaults < YAML < environment < flags; bad values name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, ValidationError

from danube_common.config import EtcdConfig, Frozen, load_config
from danube_common.errors import ConfigError

pytestmark = pytest.mark.unit
PREFIX = "DANUBE_TEST"


class Section(Frozen):
    size_bytes: int = 10
    names: list[str] = Field(default_factory=lambda: ["a"])


class Model(Frozen):
    port: int = 6650
    name: str = "default"
    ratio_pct: float = 1.5
    etcd: EtcdConfig = Field(default_factory=EtcdConfig)
    section: Section = Field(default_factory=Section)


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


def test_defaults_only() -> None:
    cfg = load_config(Model, env_prefix=PREFIX, env={})
    assert cfg == Model()
    assert cfg.etcd.endpoints == ["127.0.0.1:2379"] and cfg.section.names == ["a"]


def test_each_layer_overrides_the_one_below(tmp_path: Path) -> None:
    yaml_path = write(
        tmp_path,
        """
port: 1000
name: from-yaml
ratio_pct: 2.5
section:
  size_bytes: 5
etcd:
  cluster: yaml-cluster
""",
    )
    env = {
        f"{PREFIX}_NAME": "from-env",
        f"{PREFIX}_RATIO_PCT": "3.5",
        f"{PREFIX}_SECTION__SIZE_BYTES": "7",
        f"{PREFIX}_ETCD__ENDPOINTS": "10.0.0.1:2379, 10.0.0.2:2379",
        "OTHER_PORT": "1",  # another prefix: ignored
    }
    flags = {"ratio_pct": 4.5, "section.size_bytes": 9, "port": None, "etcd.cluster": None}
    cfg = load_config(Model, yaml_path=yaml_path, env_prefix=PREFIX, env=env, flags=flags)
    assert cfg.port == 1000, "YAML over default; a flag given as None does not count"
    assert cfg.name == "from-env", "env over YAML"
    assert cfg.ratio_pct == 4.5, "flag over env"
    assert cfg.section.size_bytes == 9, "nested flag over nested env over nested YAML"
    assert cfg.section.names == ["a"], "untouched nested defaults survive a partial section"
    assert cfg.etcd.endpoints == ["10.0.0.1:2379", "10.0.0.2:2379"], "env lists are comma-separated"
    assert cfg.etcd.cluster == "yaml-cluster"


def test_config_is_frozen() -> None:
    cfg = load_config(Model, env_prefix=PREFIX, env={})
    with pytest.raises(ValidationError):
        cfg.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("yaml_text", "env", "flags", "field"),
    [
        ("port: not-a-number\n", {}, {}, "port"),
        ("", {f"{PREFIX}_SECTION__SIZE_BYTES": "big"}, {}, "section.size_bytes"),
        ("", {}, {"etcd.request_timeout_s": "soon"}, "etcd.request_timeout_s"),
        ("sektion:\n  size_bytes: 1\n", {}, {}, "sektion"),
        ("", {f"{PREFIX}_PROT": "1"}, {}, "prot"),
        ("section: 3\n", {}, {}, "section"),
    ],
)
def test_bad_values_name_the_field(
    tmp_path: Path, yaml_text: str, env: dict[str, str], flags: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(Model, yaml_path=write(tmp_path, yaml_text), env_prefix=PREFIX, env=env, flags=flags)
    assert field in info.value.message
    assert "invalid configuration" in info.value.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(Model, yaml_path=tmp_path / "nope.yaml", env_prefix=PREFIX, env={})
    assert "nope.yaml" in info.value.message


def test_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(Model, yaml_path=write(tmp_path, "port: [1,\n"), env_prefix=PREFIX, env={})
    assert "not valid YAML" in info.value.message


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(Model, yaml_path=write(tmp_path, "- 1\n- 2\n"), env_prefix=PREFIX, env={})
    assert "mapping" in info.value.message


def test_empty_yaml_means_defaults(tmp_path: Path) -> None:
    assert load_config(Model, yaml_path=write(tmp_path, ""), env_prefix=PREFIX, env={}) == Model()
