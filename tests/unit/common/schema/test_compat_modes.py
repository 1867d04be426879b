"""Which versions each mode compares with, type changes, and the primitive types."""

from __future__ import annotations

import pytest

from danube_common.schema import CompatibilityMode, check_compatibility, compile_schema, read_errors

from ._defs import js

pytestmark = pytest.mark.unit

M = CompatibilityMode


def obj(props: dict[str, str], required: list[str]) -> bytes:
    return js(
        {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}, "required": required}
    )


# v1 has b as a string; v2 drops b; the new schema brings b back as an integer. Against v2 alone
# that is fine both ways (b is unknown to v2), against v1 it is a type change both ways.
V1 = compile_schema("json_schema", obj({"a": "string", "b": "string"}, ["a"]))
V2 = compile_schema("json_schema", obj({"a": "string"}, ["a"]))
NEW = compile_schema("json_schema", obj({"a": "string", "b": "integer"}, ["a"]))
HISTORY = {2: V2, 1: V1}  # order does not matter: the highest number is the latest


@pytest.mark.parametrize(
    ("mode", "compatible", "prefixes"),
    [
        (M.NONE, True, []),
        (M.BACKWARD, True, []),
        (M.FORWARD, True, []),
        (M.FULL, True, []),
        (M.BACKWARD_TRANSITIVE, False, ["backward (new schema reading version 1 data)"]),
        (M.FORWARD_TRANSITIVE, False, ["forward (version 1 reading new schema data)"]),
        (
            M.FULL_TRANSITIVE,
            False,
            ["backward (new schema reading version 1 data)", "forward (version 1 reading new schema data)"],
        ),
    ],
)
def test_transitive_modes_check_every_version(
    mode: CompatibilityMode, compatible: bool, prefixes: list[str]
) -> None:
    result = check_compatibility(NEW, HISTORY, mode)
    assert result.compatible is compatible
    assert sorted(e.split(":")[0] for e in result.errors) == sorted(prefixes)
    assert all("at #/properties/b: type changed" in e for e in result.errors)


def test_non_transitive_modes_check_only_the_latest() -> None:
    # compatible with v1 only: the latest (v2) decides
    latest_bad = {1: V2, 2: V1}
    assert not check_compatibility(NEW, latest_bad, M.BACKWARD).compatible
    assert check_compatibility(NEW, {1: V1, 2: V2}, M.BACKWARD).compatible


@pytest.mark.parametrize("mode", list(CompatibilityMode))
def test_an_empty_subject_accepts_anything(mode: CompatibilityMode) -> None:
    assert check_compatibility(NEW, {}, mode).compatible


PRIMS = ["bytes", "string", "number"]


@pytest.mark.parametrize("old", [*PRIMS, "json_schema"])
@pytest.mark.parametrize("new", PRIMS)
@pytest.mark.parametrize("mode", [M.BACKWARD, M.FORWARD, M.FULL_TRANSITIVE, M.NONE])
def test_type_changes_are_incompatible(old: str, new: str, mode: CompatibilityMode) -> None:
    old_schema = compile_schema(old, js({"type": "string"}) if old == "json_schema" else b"")
    result = check_compatibility(compile_schema(new, b""), {3: old_schema}, mode)
    if mode is M.NONE or old == new:
        assert result.compatible
        assert result.errors == ()
    else:
        assert not result.compatible
        assert result.errors == (f"version 3: schema type changed from {old} to {new}",)


def test_read_errors_across_types() -> None:
    assert read_errors(compile_schema("string", b""), compile_schema("bytes", b"")) == [
        "schema type changed from bytes to string"
    ]
