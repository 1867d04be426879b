"""Key and list-prefix rules: what is refused, and that the message says what is allowed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.objstore import InvalidObjectKey, validate_key, validate_prefix
from danube_common.objstore.base import MAX_KEY_BYTES, TMP_SEGMENT_PREFIX, full_key

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "topics/default/orders/00000000000000000042.seg",
        "a/b/c/d/e/f",
        "dots.in.name/.hidden/..ok/...",
        "spaces and ünïcödé/中文/emoji-🙂",
        "back\\slash/percent%2F/plus+eq=/q?a#b",
        "x" * MAX_KEY_BYTES,
    ],
)
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "empty"),
        ("/a", "starts with '/'"),
        ("a//b", "empty segment"),
        ("a/", "empty segment"),
        ("a/./b", "'.' segment"),
        ("a/../b", "'..' segment"),
        ("..", "'..' segment"),
        ("a/\nb", "control character"),
        ("a\x00", "control character"),
        ("a\x7f", "control character"),
        ("x" * (MAX_KEY_BYTES + 1), "longer than 1024 bytes"),
        ("é" * (MAX_KEY_BYTES // 2 + 1), "longer than 1024 bytes"),  # 2 bytes each in UTF-8
        (f"a/{TMP_SEGMENT_PREFIX}x", "reserved"),
    ],
)
def test_invalid_keys_say_what_is_wrong_and_what_is_allowed(key: str, why: str) -> None:
    with pytest.raises(InvalidObjectKey) as err:
        validate_key(key)
    msg = str(err.value)
    assert why in msg
    assert "'/'-separated segments" in msg and "1024 bytes" in msg
    assert err.value.code == "INVALID_OBJECT_KEY" and not err.value.retryable


def test_full_key_counts_the_prefix_in_the_length_limit() -> None:
    assert full_key("p/", "a/b") == "p/a/b"
    with pytest.raises(InvalidObjectKey, match="with the configured prefix"):
        full_key("pp/", "x" * (MAX_KEY_BYTES - 2))
    with pytest.raises(InvalidObjectKey):
        full_key("p/", "../x")


@pytest.mark.parametrize("prefix", ["", "a", "a/", "a/b/se", "a/b/", "a/.", "a/..", "a/.danube-t", "é/"])
def test_valid_list_prefixes(prefix: str) -> None:
    # The last piece may be the start of a segment, even of one that would be invalid whole.
    assert validate_prefix(prefix) == prefix


@pytest.mark.parametrize(
    ("prefix", "why"),
    [("/a", "starts with '/'"), ("a//", "empty segment"), ("a/../", "'..' segment"), ("a\n", "control")],
)
def test_invalid_list_prefixes(prefix: str, why: str) -> None:
    with pytest.raises(InvalidObjectKey, match=why):
        validate_prefix(prefix)


_segment = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/"),
    min_size=1,
    max_size=20,
).filter(lambda s: s not in (".", "..") and not s.startswith(TMP_SEGMENT_PREFIX))


@given(st.lists(_segment, min_size=1, max_size=8))
def test_keys_made_of_valid_segments_are_valid(segments: list[str]) -> None:
    key = "/".join(segments)
    assert validate_key(key) == key
    # Every prefix of a valid key is a valid list prefix.
    for i in range(len(key) + 1):
        validate_prefix(key[:i])


@given(st.text(max_size=40))
def test_validation_never_fails_with_anything_but_invalid_key(text: str) -> None:
    try:
        validate_key(text)
    except InvalidObjectKey:
        pass
    try:
        validate_prefix(text)
    except InvalidObjectKey:
        pass


def test_lone_surrogates_are_refused() -> None:
    with pytest.raises(InvalidObjectKey, match="not valid Unicode"):
        validate_key("a/\ud800")
    with pytest.raises(InvalidObjectKey, match="not valid Unicode"):
        validate_prefix("a/\udc80")
