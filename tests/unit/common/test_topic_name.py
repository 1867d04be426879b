"""Topic and namespace names: valid names round-trip, malformed ones say which rule they break."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.errors import InvalidNamespaceName, InvalidTopicName
from danube_common.topic_name import (
    MAX_NAMESPACE_LEN,
    MAX_TOPIC_LEN,
    TopicName,
    partition_names,
    validate_namespace,
)

pytestmark = pytest.mark.unit

ALLOWED = string.ascii_letters + string.digits + "_.-"


def part(max_size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=ALLOWED, min_size=1, max_size=max_size).filter(lambda s: s not in (".", ".."))


namespaces = part(MAX_NAMESPACE_LEN)
locals_ = part(MAX_TOPIC_LEN)


@given(namespaces, locals_)
def test_valid_names_round_trip(ns: str, local: str) -> None:
    name = f"/{ns}/{local}"
    t = TopicName.parse(name)
    assert (t.namespace, t.local) == (ns, local)
    assert str(t) == t.name == name
    assert TopicName.parse(str(t)) == t


@given(namespaces)
def test_valid_namespaces_pass(ns: str) -> None:
    assert validate_namespace(ns) == ns


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("default/t", "/namespace/topic"),
        ("/default", "/namespace/topic"),
        ("/a/b/c", "/namespace/topic"),
        ("", "/namespace/topic"),
        ("//t", f"1-{MAX_NAMESPACE_LEN} characters"),
        ("/" + "n" * (MAX_NAMESPACE_LEN + 1) + "/t", f"1-{MAX_NAMESPACE_LEN} characters"),
        ("/n s/t", "letters, digits"),
        ("/../t", f"1-{MAX_NAMESPACE_LEN} characters"),
        ("/ns/", f"1-{MAX_TOPIC_LEN} characters"),
        ("/ns/" + "t" * (MAX_TOPIC_LEN + 1), f"1-{MAX_TOPIC_LEN} characters"),
        ("/ns/bad name", "letters, digits"),
        ("/ns/t*", "letters, digits"),
        ("/ns/.", "topic part"),
        ("/ns/ü", "letters, digits"),
    ],
)
def test_malformed_names_name_the_rule(name: str, rule: str) -> None:
    with pytest.raises(InvalidTopicName) as info:
        TopicName.parse(name)
    assert rule in info.value.message
    assert repr(name) in info.value.message, "the message quotes the offending name"


def test_non_string_is_rejected() -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(42)  # type: ignore[arg-type]


@given(namespaces, st.text(min_size=1, max_size=30).filter(lambda s: any(c not in ALLOWED for c in s)))
def test_any_foreign_character_is_rejected(ns: str, local: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(f"/{ns}/{local}")


@pytest.mark.parametrize("ns", ["", ".", "..", "a/b", "x" * (MAX_NAMESPACE_LEN + 1), "sp ace"])
def test_bad_namespaces(ns: str) -> None:
    with pytest.raises(InvalidNamespaceName) as info:
        validate_namespace(ns)
    assert "letters, digits" in info.value.message


# ---------------------------------------------------------------- partitions


@given(namespaces, part(50), st.integers(min_value=0, max_value=100_000))
def test_partition_naming_round_trips(ns: str, local: str, n: int) -> None:
    base = TopicName(ns, local)
    p = base.partition(n)
    assert p.local == f"{local}-part-{n}"
    assert p.partition_index == n
    assert p.base == base
    assert TopicName.parse(str(p)) == p


@pytest.mark.parametrize(
    ("local", "index", "base"),
    [
        ("orders", None, "orders"),
        ("orders-part-0", 0, "orders"),
        ("orders-part-12", 12, "orders"),
        ("orders-part-01", None, "orders-part-01"),  # leading zero: not a partition name
        ("orders-part-", None, "orders-part-"),
        ("-part-3", None, "-part-3"),
        ("a-part-1-part-2", 2, "a-part-1"),
    ],
)
def test_partition_index_and_base(local: str, index: int | None, base: str) -> None:
    t = TopicName("ns", local)
    assert t.partition_index == index
    assert t.base == TopicName("ns", base)


def test_partition_names() -> None:
    assert partition_names("/ns/t", 3) == ["/ns/t-part-0", "/ns/t-part-1", "/ns/t-part-2"]
    assert partition_names("/ns/t", 0) == []
    with pytest.raises(InvalidTopicName):
        partition_names("ns/t", 2)


@pytest.mark.parametrize("name", ["/ns/t\n", "/ns\n/t"])
def test_trailing_newline_is_rejected(name: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(name)
