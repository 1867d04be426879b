"""The real PyPI ``danube-client`` (0.5.0) publishing to our cluster: the figure a Danube user gets
from the upstream Python client. It runs in its own venv (``.venv-danube-client``, made by
scripts/setup.sh) as a subprocess (bench/drivers/danube_client_helper/publish.py); its API has one unary
SendMessage per message, so only publish throughput and publish-to-ack latency are measured.

The harness calls ``run_external`` instead of driving ProducerHandles (``external_publisher``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from array import array
from pathlib import Path
from typing import Any

from bench.drivers.base import DriverUnavailable, ProducerHandle
from bench.drivers.danube import NAMESPACE, DanubeDriver

ROOT = Path(__file__).resolve().parent.parent.parent
PYTHON = ROOT / ".venv-danube-client" / "bin" / "python"
HELPER = (
    Path(__file__).resolve().parent / "danube_client_helper" / "publish.py"
)  # no __init__: not a driver module
CONCURRENCY = 1  # one send after another: what the client's API gives a plain loop


class DanubeClientDriver(DanubeDriver):
    name = "danube-client"
    supports_consume = False
    external_publisher = True

    async def start(self, workdir: Path) -> None:
        if not PYTHON.exists():
            raise DriverUnavailable(
                f"{PYTHON.relative_to(ROOT)} missing: run scripts/setup.sh (it installs danube-client there)"
            )
        await super().start(workdir)

    async def producer(self, topic: str) -> ProducerHandle:
        raise NotImplementedError("danube-client publishes from its own process: use run_external")

    async def run_external(
        self, topic: str, *, size: int, rate: int, warmup_s: float, duration_s: float, reliable: bool
    ) -> dict[str, Any]:
        """Run the helper; return {"published", "errors", "window_s", "lat_us": array('q')}. Its CPU
        counts with the harness's (a reaped child: os.times().children_*)."""
        argv = [
            str(PYTHON),
            "-I",  # isolated: neither our checkout nor PYTHONPATH shadows its "danube" package
            str(HELPER),
            "--service-url",
            self._cluster.service_url,
            "--topic",
            NAMESPACE + topic,
            "--size",
            str(size),
            "--rate",
            str(rate),
            "--warmup-s",
            str(warmup_s),
            "--duration-s",
            str(duration_s),
            "--concurrency",
            str(CONCURRENCY),
        ]
        if reliable:
            argv.append("--reliable")
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), warmup_s + duration_s + 90)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        if proc.returncode != 0:
            raise RuntimeError(f"danube-client helper failed ({proc.returncode}): {err.decode()[-2000:]}")
        res: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        res["lat_us"] = array("q", res["lat_us"])
        print(f"  (danube-client: {CONCURRENCY} send in flight, one unary call each)", file=sys.stderr)
        return res
