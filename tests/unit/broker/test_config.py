"""Configuration layers, validation and the CLI contract."""

from __future__ import annotations

import pytest

from danube_broker.__main__ import build_parser, load, main
from danube_broker.config import BrokerConfig
from danube_common.errors import ConfigError

pytestmark = pytest.mark.unit


def test_defaults() -> None:
    cfg = load([], env={})
    assert cfg.listen_addr == "0.0.0.0:6651"
    assert cfg.etcd.cluster == "danube" and cfg.etcd.endpoints == ["127.0.0.1:2379"]
    assert cfg.registration_ttl_s == 10 and cfg.auto_create_topics
    assert cfg.producer_idle_timeout_s == 30 and cfg.consumer_queue_messages == 1000
    assert cfg.slow_consumer_policy == "drop" and cfg.max_messages_per_frame == 500
    assert cfg.consumer_reconnect_grace_s == 10 and cfg.subscription_idle_timeout_s == 60
    assert len(cfg.broker_id) == 8 and load([], env={}).broker_id != cfg.broker_id


def test_flags_override_env_override_yaml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    yml = tmp_path / "broker.yaml"
    yml.write_text("broker_id: from-yaml\nconsumer_queue_messages: 7\nmax_message_size_bytes: 11\n")
    env = {"DANUBE_BROKER_CONSUMER_QUEUE_MESSAGES": "8", "DANUBE_BROKER_ETCD__ENDPOINTS": "a:1,b:2"}
    cfg = load(
        ["--config", str(yml), "--broker-id", "b9", "--listen", "127.0.0.1:0", "--cluster", "c1",
         "--ready-file", "/tmp/r.json", "--log-level", "debug"],
        env=env,
    )  # fmt: skip
    assert cfg.broker_id == "b9" and cfg.consumer_queue_messages == 8 and cfg.max_message_size_bytes == 11
    assert cfg.etcd.endpoints == ["a:1", "b:2"] and cfg.etcd.cluster == "c1"
    assert cfg.listen_addr == "127.0.0.1:0" and cfg.ready_file == "/tmp/r.json" and cfg.log_level == "DEBUG"
    assert load(["--etcd-endpoints", "x:1, y:2"], env=env).etcd.endpoints == ["x:1", "y:2"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("listen_addr", "nowhere", "HOST:PORT"),
        ("broker_id", "a/b", "broker id"),
        ("slow_consumer_policy", "panic", "slow_consumer_policy"),
        ("max_message_size_bytes", 10**9, "gRPC frame limit"),
        ("registration_ttl_s", 1, "at least 2"),
        ("log_level", "LOUD", "log level"),
        ("poison_policy", "explode", "poison_policy"),
        ("poison_policy", "dead_letter", "set-policy"),
        ("default_durability", "sometimes", "default_durability"),
        ("max_unacked_messages_per_consumer", 0, "max_unacked_messages_per_consumer"),
        ("cursor_flush_interval_ms", 0, "cursor_flush_interval_ms"),
        ("internal_listen_addr", "nowhere", "HOST:PORT"),
        ("internal_listen_addr", "127.0.0.1:6651", "a port of its own"),
    ],
)
def test_bad_values_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load([], env={f"DANUBE_BROKER_{field.upper()}": str(value)})


def test_advertised_address() -> None:
    assert BrokerConfig().advertised_addr(7000) == "127.0.0.1:7000"
    assert BrokerConfig(listen_addr="127.0.0.1:0").advertised_addr(7001) == "127.0.0.1:7001"
    assert BrokerConfig(listen_addr="10.1.2.3:6651").advertised_addr(6651) == "10.1.2.3:6651"
    assert BrokerConfig(advertised_host="broker-1.internal").advertised_addr(6651) == "broker-1.internal:6651"


TLS = {"cert_file": "b.pem", "key_file": "b.key", "ca_file": "ca.pem"}
AUTH = {"enabled": True}


def test_internal_listener_flags_env_and_addresses() -> None:
    assert BrokerConfig().internal_listen_addr is None
    cfg = load(["--internal-listen", "0.0.0.0:6661", "--internal-advertised-host", "b1.svc"], env={})
    assert cfg.internal_listen_addr == "0.0.0.0:6661" and cfg.internal_advertised_addr(6661) == "b1.svc:6661"
    env = {"DANUBE_BROKER_INTERNAL_LISTEN_ADDR": "127.0.0.1:0"}
    assert load([], env=env).internal_listen_addr == "127.0.0.1:0"
    # Without an internal host of its own: the advertised host, else the listen host rule.
    assert load([], env=env).internal_advertised_addr(7100) == "127.0.0.1:7100"
    cfg = BrokerConfig(internal_listen_addr="0.0.0.0:0", advertised_host="b1.example")
    assert cfg.internal_advertised_addr(7100) == "b1.example:7100"
    assert BrokerConfig(internal_listen_addr="10.0.0.5:0").internal_advertised_addr(1) == "10.0.0.5:1"


def test_internal_listener_requires_client_certificates_with_tls() -> None:
    cfg = BrokerConfig.model_validate({"internal_listen_addr": "127.0.0.1:0", "tls": TLS})
    assert not cfg.tls.require_client_cert and cfg.internal_tls.require_client_cert
    assert cfg.internal_tls.cert_file == "b.pem" and cfg.internal_tls.ca_file == "ca.pem"
    assert not BrokerConfig(internal_listen_addr="127.0.0.1:0").internal_tls.enabled  # plaintext stays
    with pytest.raises(ValueError, match=r"needs tls\.ca_file"):
        BrokerConfig.model_validate(
            {"internal_listen_addr": "127.0.0.1:0", "tls": {"cert_file": "b.pem", "key_file": "b.key"}}
        )


@pytest.mark.parametrize(
    ("fields", "warned"),
    [
        ({}, None),  # auth off: nothing to prove
        ({"auth": AUTH}, "TLS is not"),
        ({"auth": AUTH, "tls": TLS}, "internal_listen_addr"),  # the client port does not ask for certificates
        (
            {"auth": AUTH, "tls": {**TLS, "require_client_cert": True}},
            None,
        ),  # it does: every client needs one
        ({"auth": AUTH, "tls": TLS, "internal_listen_addr": "127.0.0.1:0"}, None),
        ({"auth": AUTH, "internal_listen_addr": "127.0.0.1:0"}, "TLS is not"),
    ],
)
def test_warning_when_services_cannot_prove_who_they_are(
    fields: dict[str, object], warned: str | None
) -> None:
    warning = BrokerConfig.model_validate(fields).internal_calls_warning()
    if warned is None:
        assert warning is None
    else:
        assert warning is not None and warned in warning and "refused" in warning


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--config", "--broker-id", "--listen", "--advertised-host", "--etcd-endpoints", "--cluster",
                 "--ready-file", "--log-level", "--data-dir", "--internal-listen", "--internal-advertised-host",
                 "DANUBE_BROKER_"):  # fmt: skip
        assert flag in out


def test_bad_config_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANUBE_BROKER_CONSUMER_QUEUE_MESSAGES", "0")
    assert main([]) == 2
    assert "consumer_queue_messages" in capsys.readouterr().err


def test_reliable_defaults_and_layers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = load(["--broker-id", "b7"], env={})
    assert str(cfg.data_path) == "data/broker-b7" and cfg.default_durability == "fsync"
    assert cfg.max_unacked_messages_per_consumer == 1000 and cfg.cursor_flush_interval_ms == 500
    policy = cfg.default_subscription_policy()
    assert (policy.max_redeliveries, policy.ack_timeout_ms, policy.poison_policy) == (0, 30_000, "block")
    assert (policy.redelivery_backoff_base_ms, policy.redelivery_backoff_max_ms) == (1000, 60_000)
    assert (cfg.retention_time_s, cfg.retention_size_bytes) == (0, 0)
    yml = tmp_path / "broker.yaml"
    yml.write_text("wal:\n  segment_max_bytes: 1024\npoison_policy: drop\n")
    cfg = load(
        ["--config", str(yml), "--data-dir", "/srv/wal"], env={"DANUBE_BROKER_WAL__TAIL_CACHE_BYTES": "0"}
    )
    assert cfg.wal.segment_max_bytes == 1024 and cfg.wal.tail_cache_bytes == 0
    assert str(cfg.data_path) == "/srv/wal" and cfg.default_subscription_policy().poison_policy == "drop"
