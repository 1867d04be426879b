"""danube-admin for reliable topics, without a server: parsing of the new flags, and how
stats and policies are printed (the commands run against stand-in stubs)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_sdk.cli import admin, admin_commands
from tests.unit.lookup.fake_stats import FakeStatsBroker

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    return admin.build_parser().parse_args(list(argv))


def test_topics_create_reliability_flags() -> None:
    a = parse(
        "topics",
        "create",
        "/d/t",
        "--dispatch-strategy",
        "reliable",
        "--durability",
        "cloud",
        "--retention-time-s",
        "3600",
        "--retention-size-bytes",
        "1000",
    )
    assert (a.func, a.durability, a.retention_time_s, a.retention_size_bytes) == (
        admin.topics_create,
        "cloud",
        3600,
        1000,
    )
    a = parse("topics", "create", "/d/t")
    assert (a.durability, a.retention_time_s, a.retention_size_bytes) == (None, 0, 0)


def test_stats_and_policy_commands_parse() -> None:
    a = parse("topics", "stats", "/d/t-part-0", "-o", "json")
    assert (a.func, a.topic, a.output) == (admin.topics_stats, "/d/t-part-0", "json")
    a = parse(
        *("subscriptions", "set-policy", "/d/t", "-s", "billing", "--max-redeliveries", "5"),
        *("--ack-timeout-ms", "30000", "--backoff-base-ms", "100", "--backoff-max-ms", "1000"),
        *("--poison-policy", "dead_letter", "--dead-letter-topic", "/d/dlq"),
    )
    assert a.func is admin.subscriptions_set_policy
    assert (a.topic, a.subscription, a.max_redeliveries, a.ack_timeout_ms) == ("/d/t", "billing", 5, 30000)
    assert (a.backoff_base_ms, a.backoff_max_ms, a.poison_policy, a.dead_letter_topic) == (
        100,
        1000,
        "dead_letter",
        "/d/dlq",
    )
    a = parse("subscriptions", "get-policy", "/d/t", "--subscription", "billing")
    assert (a.func, a.subscription) == (admin.subscriptions_get_policy, "billing")


def test_set_policy_options_not_given_are_none() -> None:
    a = parse("subscriptions", "set-policy", "/d/t", "-s", "billing", "--max-redeliveries", "0")
    assert a.max_redeliveries == 0
    assert (a.ack_timeout_ms, a.backoff_base_ms, a.backoff_max_ms, a.poison_policy, a.dead_letter_topic) == (
        None,
        None,
        None,
        None,
        None,
    )
    # No option at all parses: the server refuses it with a message saying what to pass.
    assert parse("subscriptions", "set-policy", "/d/t", "-s", "billing").poison_policy is None


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "create", "/a/b", "--durability", "paper"],
        ["topics", "create", "/a/b", "--retention-time-s", "-1"],
        ["topics", "create", "/a/b", "--retention-size-bytes", "lots"],
        ["topics", "stats"],
        ["subscriptions", "set-policy", "/a/b", "--poison-policy", "drop"],  # -s is required
        ["subscriptions", "set-policy", "/a/b", "-s", "x", "--poison-policy", "retry"],
        [
            "subscriptions",
            "set-policy",
            "/a/b",
            "-s",
            "x",
            "--poison-policy",
            "drop",
            "--ack-timeout-ms",
            "-5",
        ],
        ["subscriptions", "get-policy", "/a/b"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin.main(argv)
    assert info.value.code == 2
    assert "usage: danube-admin" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["subscriptions", "--help"], ["subscriptions", "set-policy", "--help"], ["topics", "stats", "--help"]],
)
def test_help_has_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        admin.main(argv)
    assert "examples:" in capsys.readouterr().out


class _Topics:
    """Stand-in for the TopicAdmin stub: canned answers, requests recorded."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.requests: list[Any] = []

    def __getattr__(self, method: str) -> Any:
        def call(req: Any, *, timeout: float) -> Any:
            self.requests.append(req)
            return self.answers[method]

        return call


def run(cmd: Any, topics: _Topics, *argv: str) -> None:
    a = parse(*argv)
    cmd(admin.Admin(None, None, topics, 1.0), a)  # type: ignore[arg-type]


def test_stats_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    st = FakeStatsBroker("b1").sample("/d/t")
    topics = _Topics(GetTopicStats=st)
    run(admin_commands.topics_stats, topics, "topics", "stats", "/d/t")
    out = capsys.readouterr().out
    assert "offsets kept       10 .. 109" in out and "4096 bytes in 2 segment(s), from offset 60" in out
    assert (
        "object storage     offsets 10 .. 99; 3 read(s) of 50 message(s) (4 GETs, 5000 bytes), 0 failed; "
        "retention deleted 6 segment(s), 60000 bytes" in out
    )
    lines = out.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("SUBSCRIPTION"))
    assert lines[header].split() == [c.upper() for c in admin_commands.SUBSCRIPTION_COLUMNS]
    assert lines[header + 1].split() == [
        "billing",
        "exclusive",
        "1",
        "7",
        "102",
        "3",
        "105",
        "4",
        "1",
        "0",
        "9.5/s",
    ]
    assert lines[header + 2].split()[:5] == ["fresh", "shared", "0", "100", "-"]  # no cursor yet

    run(admin_commands.topics_stats, topics, "topics", "stats", "/d/t", "-o", "json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["next_offset"] == 110 and doc["durability"] == "fsync"
    assert doc["uploaded"] == {"first_offset": 10, "next_offset": 100}
    assert (doc["retention_deleted_segments"], doc["remote_entries"]) == (6, 50)
    assert doc["subscriptions"][0]["redelivered_total"] == 4
    assert doc["subscriptions"][1]["cursor"] is None
    assert [r.name for r in topics.requests] == ["/d/t", "/d/t"]


def test_policy_printing(capsys: pytest.CaptureFixture[str]) -> None:
    unset = apb.SubscriptionPolicyResponse(topic="/d/t", subscription="s")
    run(
        admin_commands.subscriptions_get_policy,
        _Topics(GetSubscriptionPolicy=unset),
        "subscriptions",
        "get-policy",
        "/d/t",
        "-s",
        "s",
    )
    assert capsys.readouterr().out.strip() == "subscription s on /d/t: defaults (broker config)"
    run(
        admin_commands.subscriptions_get_policy,
        _Topics(GetSubscriptionPolicy=unset),
        *("subscriptions", "get-policy", "/d/t", "-s", "s", "-o", "json"),
    )
    assert json.loads(capsys.readouterr().out) == {"topic": "/d/t", "subscription": "s", "policy": None}

    p = apb.SubscriptionPolicy(max_redeliveries=5, poison_policy="dead_letter", dead_letter_topic="/d/dlq")
    stored = apb.SubscriptionPolicyResponse(topic="/d/t", subscription="s", policy=p)
    topics = _Topics(SetSubscriptionPolicy=stored)
    run(
        admin_commands.subscriptions_set_policy,
        topics,
        *("subscriptions", "set-policy", "/d/t", "-s", "s", "--max-redeliveries", "5"),
        *("--poison-policy", "dead_letter", "--dead-letter-topic", "/d/dlq"),
    )
    out = capsys.readouterr().out
    assert out.startswith("set the policy of subscription s on /d/t")
    assert "poison_policy               dead_letter" in out
    (req,) = topics.requests
    assert req.policy == p and (req.topic, req.subscription) == ("/d/t", "s")
    assert sorted(f.name for f, _ in req.policy.ListFields()) == [
        "dead_letter_topic",
        "max_redeliveries",
        "poison_policy",
    ]
    assert "note:" not in capsys.readouterr().err


def _table(out: str) -> dict[str, str]:
    """The FIELD/VALUE rows of a printed policy."""
    lines = out.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.split() == ["FIELD", "VALUE"])
    return {k: v for k, v in (ln.split(maxsplit=1) for ln in lines[header + 1 :])}


def test_get_policy_shows_unset_fields_as_broker_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    p = apb.SubscriptionPolicy(max_redeliveries=0, poison_policy="drop")
    topics = _Topics(
        GetSubscriptionPolicy=apb.SubscriptionPolicyResponse(topic="/d/t", subscription="s", policy=p)
    )
    run(admin_commands.subscriptions_get_policy, topics, "subscriptions", "get-policy", "/d/t", "-s", "s")
    out = capsys.readouterr().out
    assert out.startswith("policy of subscription s on /d/t")
    assert _table(out) == {
        "max_redeliveries": "0",  # set to 0 explicitly: shown as 0, not as a default
        "ack_timeout_ms": "(broker default)",
        "redelivery_backoff_base_ms": "(broker default)",
        "redelivery_backoff_max_ms": "(broker default)",
        "poison_policy": "drop",
        "dead_letter_topic": "(broker default)",
    }
    run(
        admin_commands.subscriptions_get_policy,
        topics,
        *("subscriptions", "get-policy", "/d/t", "-s", "s", "-o", "json"),
    )
    assert json.loads(capsys.readouterr().out)["policy"] == {
        "max_redeliveries": 0,
        "ack_timeout_ms": None,
        "redelivery_backoff_base_ms": None,
        "redelivery_backoff_max_ms": None,
        "poison_policy": "drop",
        "dead_letter_topic": None,
    }


@pytest.mark.parametrize(
    ("argv", "sent", "note"),
    [
        (["--ack-timeout-ms", "60000"], {"ack_timeout_ms": 60000}, ""),
        (
            ["--max-redeliveries", "0", "--poison-policy", "drop"],
            {"max_redeliveries": 0, "poison_policy": "drop"},
            "note: --max-redeliveries 0 means unlimited: the drop policy never applies",
        ),
        (
            ["--max-redeliveries", "0"],
            {"max_redeliveries": 0},
            "note: --max-redeliveries 0 means unlimited: the poison policy never applies",
        ),
        (["--backoff-max-ms", "0"], {"redelivery_backoff_max_ms": 0}, ""),
        ([], {}, ""),
    ],
)
def test_set_policy_sends_only_the_options_given(
    argv: list[str], sent: dict[str, Any], note: str, capsys: pytest.CaptureFixture[str]
) -> None:
    resp = apb.SubscriptionPolicyResponse(
        topic="/d/t", subscription="s", policy=apb.SubscriptionPolicy(**sent)
    )
    topics = _Topics(SetSubscriptionPolicy=resp)
    run(
        admin_commands.subscriptions_set_policy,
        topics,
        "subscriptions",
        "set-policy",
        "/d/t",
        "-s",
        "s",
        *argv,
    )
    (req,) = topics.requests
    assert {f.name: v for f, v in req.policy.ListFields()} == sent
    assert req.HasField("policy")  # even when empty: the server says what to pass
    assert capsys.readouterr().err.strip() == note
