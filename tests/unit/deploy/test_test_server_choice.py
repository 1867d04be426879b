"""The one choice of tests/support/containers.py: local binaries or containers, and why.

The probes (is there an engine, are the images built) are passed in, so no Docker is needed
here; tests/integration/test_server_backends.py runs both branches for real.
"""

from __future__ import annotations

import pytest

from tests.support import containers

pytestmark = pytest.mark.unit


def never(*_: object) -> None:
    raise AssertionError("probed although the choice did not need it")


@pytest.mark.parametrize("value", [None, "", "0", "false", "no"])
def test_local_binaries_by_default_without_probing_docker(value: str | None) -> None:
    env = {} if value is None else {containers.ENV_VAR: value}
    made = containers.decide(env, engine=never, images=never)
    assert made.backend == "local" and not made.fell_back


@pytest.mark.parametrize("value", ["1", "true", "yes", "TRUE"])
def test_containers_when_asked_and_docker_has_the_images(value: str) -> None:
    made = containers.decide({containers.ENV_VAR: value}, engine=lambda: None, images=lambda _: [])
    assert made.backend == "containers" and not made.fell_back
    assert containers.ETCD_IMAGE in made.reason and containers.MOTO_IMAGE in made.reason


def test_falls_back_to_local_binaries_saying_why() -> None:
    no_engine = containers.decide(
        {containers.ENV_VAR: "1"}, engine=lambda: "the Docker engine does not answer", images=never
    )
    assert no_engine.backend == "local" and no_engine.fell_back
    assert "the Docker engine does not answer" in no_engine.reason

    missing = containers.decide(
        {containers.ENV_VAR: "1"}, engine=lambda: None, images=lambda _: [containers.MOTO_IMAGE]
    )
    assert missing.backend == "local" and missing.fell_back
    assert containers.MOTO_IMAGE in missing.reason and "scripts/compose_test.sh" in missing.reason


def test_no_fallback_when_containers_are_required() -> None:
    env = {containers.ENV_VAR: "1", containers.REQUIRE_VAR: "1"}
    with pytest.raises(RuntimeError, match="the Docker engine does not answer"):
        containers.decide(env, engine=lambda: "the Docker engine does not answer", images=never)


def test_a_value_it_does_not_understand_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"use 1 .* or 0"):
        containers.decide({containers.ENV_VAR: "maybe"}, engine=never, images=never)


def test_an_explicit_backend_overrides_the_runs_choice() -> None:
    assert containers.backend("containers") == "containers"
    assert containers.backend("local") == "local"
