"""danube-cli with compression and chunking against a local cluster of broker processes (payload
limit 256 KB): a 1 MB random file and a compressible 2 MB JSON file go through as chunks and come
out of `danube-cli consume` whole."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from danube_local.cluster import LocalCluster
from tests.e2e.conftest import MAX_MESSAGE_SIZE_BYTES, cli, subprocess_env
from tests.support import unique

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def produce(cluster: LocalCluster, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli("danube-cli"), "produce", "-s", cluster.service_url, "-t", topic, "--reliable", *args],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )  # fmt: skip


def test_cli_produces_compressed_chunks_and_consumes_them_whole(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = f"/default/{unique('cli-big')}"
    created = produce(cluster, topic, "-m", "create")
    assert created.returncode == 0, created.stderr
    random_file = tmp_path / "random.bin"
    random_file.write_bytes(os.urandom(4 * MAX_MESSAGE_SIZE_BYTES))
    doc = json.dumps([{"id": i, "name": f"item-{i}", "tags": ["x", "y"]} for i in range(40_000)]).encode()
    json_file = tmp_path / "doc.json"
    json_file.write_bytes(doc)
    assert len(doc) > 4 * MAX_MESSAGE_SIZE_BYTES

    err_path = tmp_path / "consume.err"
    with err_path.open("w") as err:
        consumer = subprocess.Popen(
            [cli("danube-cli"), "consume", "-s", cluster.service_url, "-t", topic, "-m", "s",
             "--sub-type", "exclusive", "-c", "2", "--output", "json"],
            stdout=subprocess.PIPE, stderr=err, text=True, env=subprocess_env(),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "consuming" not in err_path.read_text():  # subscribed: what comes next reaches it
            assert consumer.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, "consumer did not subscribe"
            time.sleep(0.05)
        sent = produce(cluster, topic, "-f", str(random_file), "--compression", "zstd")
        assert sent.returncode == 0, sent.stderr
        sent = produce(cluster, topic, "-f", str(json_file), "--compression", "lz4")
        assert sent.returncode == 0, sent.stderr
        out, _ = consumer.communicate(timeout=60)
    finally:
        if consumer.poll() is None:
            consumer.kill()
    assert consumer.returncode == 0, err_path.read_text()
    first, second = (json.loads(line) for line in out.splitlines())
    assert base64.b64decode(first["payload_base64"]) == random_file.read_bytes()
    assert len(first["chunk_offsets"]) == 4  # random bytes do not compress: 4 chunks of the limit
    assert second["payload"] == doc.decode()
    assert 1 < len(second["chunk_offsets"]) < 4  # lz4 made it smaller, still over the limit


def test_cli_no_chunking_refuses_with_a_hint(cluster: LocalCluster, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(MAX_MESSAGE_SIZE_BYTES + 1))
    res = produce(cluster, f"/default/{unique('cli-refused')}", "-f", str(big), "--no-chunking")
    assert res.returncode == 1
    assert "error:" in res.stderr and "--no-chunking" in res.stderr and "Traceback" not in res.stderr
