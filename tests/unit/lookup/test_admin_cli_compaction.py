"""danube-admin and compaction: `topics compact` (parsing, table and JSON, its deadline, its
errors through `main` against a stand-in admin server on loopback), the compaction line of
`topics stats`, and the compaction_threshold_bytes policy flag."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from danube_common.errors import DanubeError, FailedPrecondition
from danube_common.grpc_util import bind, new_server
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_sdk.cli import admin, admin_commands, admin_ns_policies
from tests.unit.lookup.fake_stats import FakeStatsBroker
from tests.unit.lookup.test_admin_cli_reliable import _Topics, parse, run

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def view(topic: str = "/d/t") -> apb.CompactionInfo:
    return FakeStatsBroker("b1").compaction_sample(topic)


class _TimedTopics(_Topics):
    """Also records each call's deadline."""

    def __init__(self, **answers: Any) -> None:
        super().__init__(**answers)
        self.timeouts: list[float] = []

    def __getattr__(self, method: str) -> Any:
        def call(req: Any, *, timeout: float) -> Any:
            self.requests.append(req)
            self.timeouts.append(timeout)
            answer = self.answers[method]
            if isinstance(answer, BaseException):
                raise answer
            return answer

        return call


def test_compact_parses_with_its_own_deadline() -> None:
    a = parse("topics", "compact", "/d/t-part-0")
    assert (a.func, a.topic, a.wait_s, a.output) == (admin.topics_compact, "/d/t-part-0", 300.0, "table")
    a = parse("topics", "compact", "/d/t", "--wait-s", "1800", "-o", "json")
    assert (a.wait_s, a.output) == (1800.0, "json")


@pytest.mark.parametrize("argv", [["topics", "compact"], ["topics", "compact", "/d/t", "--wait-s", "0"]])
def test_compact_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin.main(argv)
    assert info.value.code == 2
    assert "usage: danube-admin topics compact" in capsys.readouterr().err


def test_compact_help_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        admin.main(["topics", "compact", "--help"])
    out = capsys.readouterr().out
    assert "compact a reliable topic now, on its owning broker" in out
    assert "examples:" in out and "--wait-s" in out
    with pytest.raises(SystemExit):
        admin.main(["topics", "--help"])
    assert "compact" in capsys.readouterr().out


def test_compact_prints_the_view_as_a_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    topics = _TimedTopics(CompactTopic=view())
    run(admin_commands.topics_compact, topics, "topics", "compact", "/d/t", "--wait-s", "60")
    out = capsys.readouterr().out
    assert out.startswith(
        "/d/t compacted below offset 1000: readers with read_compacted get its newest message per key there"
    )
    rows = {ln.split("  ")[0]: ln.split("  ", 1)[1].strip() for ln in out.splitlines()[2:] if ln.strip()}
    assert rows["horizon"] == "1000" and rows["keys"] == "40"
    assert rows["entries"] == "42 message(s), 12345 bytes"
    assert rows["duration"] == "1.25s" and rows["stored in"] == "object storage"
    assert rows["compacted at"] == "2023-11-14T22:13:20Z"
    assert [r.name for r in topics.requests] == ["/d/t"]
    assert topics.timeouts == [60.0]  # --wait-s, not --timeout-s

    run(admin_commands.topics_compact, topics, "topics", "compact", "/d/t", "-o", "json")
    assert json.loads(capsys.readouterr().out) == {
        "name": "/d/t",
        "horizon": 1000,
        "keys": 40,
        "entries": 42,
        "bytes": 12345,
        "compacted_at_ms": 1_700_000_000_000,
        "duration_s": 1.25,
        "messages_read": 1000,
        "stored_in": "object storage",
    }
    assert topics.timeouts[-1] == 300.0


class _Deadline(grpc.RpcError):
    """What a sync stub raises when the client's own deadline passes."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        return "Deadline Exceeded"

    def trailing_metadata(self) -> tuple[()]:
        return ()


def test_compact_past_its_deadline_says_it_may_still_finish() -> None:
    topics = _TimedTopics(CompactTopic=_Deadline())
    with pytest.raises(SystemExit) as info:
        run(admin_commands.topics_compact, topics, "topics", "compact", "/d/t", "--wait-s", "5")
    message = str(info.value.code)
    assert message.startswith("error: no answer within 5s: the compaction may still finish on the broker")
    assert "danube-admin topics stats /d/t" in message and "--wait-s" in message


def test_stats_show_the_compacted_view(capsys: pytest.CaptureFixture[str]) -> None:
    st = FakeStatsBroker("b1").sample("/d/t")
    run(admin_commands.topics_stats, _Topics(GetTopicStats=st), "topics", "stats", "/d/t")
    out = capsys.readouterr().out
    assert "compaction" not in out  # never compacted: no line
    run(admin_commands.topics_stats, _Topics(GetTopicStats=st), "topics", "stats", "/d/t", "-o", "json")
    assert json.loads(capsys.readouterr().out)["compaction"] is None

    st.has_compaction = True
    st.compaction.CopyFrom(view())
    run(admin_commands.topics_stats, _Topics(GetTopicStats=st), "topics", "stats", "/d/t")
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("compaction"))
    assert line.split(None, 1)[1] == (
        "below offset 1000: 40 key(s), 42 message(s), 12345 bytes; compacted at 2023-11-14T22:13:20Z "
        "in 1.25s, in object storage"
    )
    run(admin_commands.topics_stats, _Topics(GetTopicStats=st), "topics", "stats", "/d/t", "-o", "json")
    doc = json.loads(capsys.readouterr().out)["compaction"]
    assert (doc["horizon"], doc["keys"], doc["bytes"], doc["stored_in"]) == (
        1000,
        40,
        12345,
        "object storage",
    )


# ---------------------------------------------------------------------------- through main


class _Admin(apb_grpc.TopicAdminServicer):
    def __init__(self) -> None:
        self.answer: apb.CompactionInfo | DanubeError = view()

    async def CompactTopic(self, request: apb.CompactTopicRequest, context: object) -> apb.CompactionInfo:
        if isinstance(self.answer, DanubeError):
            raise self.answer
        return self.answer


@pytest.fixture
async def admin_server() -> AsyncIterator[tuple[str, _Admin]]:
    fake = _Admin()
    server = new_server()
    apb_grpc.add_TopicAdminServicer_to_server(fake, server)
    port = bind(server, "127.0.0.1:0")
    await server.start()
    try:
        yield f"http://127.0.0.1:{port}", fake
    finally:
        await server.stop(grace=None)


async def test_compact_through_main(
    admin_server: tuple[str, _Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    url, fake = admin_server
    argv = ["--admin-url", url, "topics", "compact", "/d/t", "-o", "json"]
    assert await asyncio.to_thread(admin.main, argv) == 0
    assert json.loads(capsys.readouterr().out)["horizon"] == 1000

    fake.answer = FailedPrecondition("/d/plain is a non_reliable topic, which keeps nothing to compact")
    assert await asyncio.to_thread(admin.main, ["--admin-url", url, "topics", "compact", "/d/plain"]) == 1
    err = capsys.readouterr().err
    assert "error: /d/plain is a non_reliable topic, which keeps nothing to compact" in err
    assert "hint: only reliable topics are compacted, one partition at a time: see " in err
    assert "`danube-admin topics describe /d/plain`" in err


# ---------------------------------------------------------------------------- the policy


def test_threshold_policy_flags() -> None:
    a = parse("topics", "set-policies", "/d/t", "--compaction-threshold-bytes", "1048576")
    assert a.compaction_threshold_bytes == 1 << 20
    a = parse("namespaces", "set-policies", "ns", "--compaction-threshold-bytes", "0")
    assert a.compaction_threshold_bytes == 0
    a = parse("topics", "set-policies", "/d/t", "--clear", "compaction_threshold_bytes")
    assert a.clear == ["compaction_threshold_bytes"]


def test_threshold_policy_is_sent_and_shown(capsys: pytest.CaptureFixture[str]) -> None:
    own = apb.NamespacePolicies(compaction_threshold_bytes=1 << 20)
    resp = apb.TopicPoliciesResponse(name="/d/t", own=own, effective=own)
    topics = _TimedTopics(SetTopicPolicies=resp)
    run(
        admin_ns_policies.topics_set_policies,
        topics,
        *("topics", "set-policies", "/d/t", "--compaction-threshold-bytes", "1048576"),
    )
    assert topics.requests[0].policies == own
    row = next(
        ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("compaction_threshold_bytes")
    )
    assert row.split()[1:3] == ["1048576", "1048576"]
    assert admin_ns_policies.policies_dict(apb.NamespacePolicies())["compaction_threshold_bytes"] is None


def test_describe_shows_the_threshold_in_force(capsys: pytest.CaptureFixture[str]) -> None:
    t = apb.TopicInfo(name="/d/t", dispatch_strategy="reliable", durability="fsync")
    run(admin_commands.topics_describe, _Topics(DescribeTopic=t), "topics", "describe", "/d/t")
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("compaction"))
    assert line.split(None, 1)[1].startswith("on request (no compaction_threshold_bytes here")

    t.compaction_threshold_bytes = 65536
    run(admin_commands.topics_describe, _Topics(DescribeTopic=t), "topics", "describe", "/d/t")
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("compaction"))
    assert line.split(None, 1)[1] == "after every 65536 bytes published (and on request)"
    run(admin_commands.topics_describe, _Topics(DescribeTopic=t), "topics", "describe", "/d/t", "-o", "json")
    assert json.loads(capsys.readouterr().out)["compaction_threshold_bytes"] == 65536

    plain = apb.TopicInfo(name="/d/p", dispatch_strategy="non_reliable")
    run(admin_commands.topics_describe, _Topics(DescribeTopic=plain), "topics", "describe", "/d/p")
    assert "compaction" not in capsys.readouterr().out  # nothing to compact on a non-reliable topic
