"""A stand-in for danube-broker / danube-lookup that honours their command-line contract.

It parses the same flags, listens on the requested ports (port 0: a free one), writes the ready
file atomically and exits 0 on SIGTERM/SIGINT. ``FAKE_SERVICE_MODE`` (optionally scoped to one
service with ``FAKE_SERVICE_MODE_<NAME>``, e.g. ``FAKE_SERVICE_MODE_BROKER_2``) changes that:

- ``ok``           the default
- ``crash``        print an error and exit 3 before becoming ready
- ``hang``         never become ready
- ``ignore-term``  become ready, then ignore SIGTERM (only SIGKILL stops it)
- ``spawn-child``  become ready after starting a grandchild that sleeps in the same process group
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path


def _listen(addr: str) -> socket.socket:
    host, _, port = addr.rpartition(":")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    s.listen()
    return s


def main(service: str) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--admin-listen")
    p.add_argument("--broker-id")
    p.add_argument("--advertised-host")
    p.add_argument("--etcd-endpoints", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--ready-file", required=True)
    p.add_argument("--config")
    p.add_argument("--log-level")
    p.add_argument("--http-listen")
    args = p.parse_args()
    name = service if service == "lookup" else f"broker_{args.broker_id}"
    mode = os.environ.get(f"FAKE_SERVICE_MODE_{name.upper()}", os.environ.get("FAKE_SERVICE_MODE", "ok"))
    print(f"fake {name} starting in mode {mode}: {sys.argv[1:]}", flush=True)
    if mode == "crash":
        print(f"fake {name}: boom, cannot start", flush=True)
        return 3
    stop = threading.Event()
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    if mode == "hang":
        stop.wait()
        return 0
    sock = _listen(args.listen)
    host, port = sock.getsockname()[:2]
    addr = f"{host}:{port}"
    if service == "lookup":
        admin = _listen(args.admin_listen)
        ahost, aport = admin.getsockname()[:2]
        info = {
            "service": "lookup",
            "addr": addr,
            "url": f"http://{addr}",
            "admin_addr": f"{ahost}:{aport}",
            "admin_url": f"http://{ahost}:{aport}",
            "pid": os.getpid(),
        }
    else:
        adv = f"{args.advertised_host}:{port}"
        info = {
            "service": "broker",
            "broker_id": args.broker_id,
            "addr": adv,
            "url": f"http://{adv}",
            "pid": os.getpid(),
        }
    if mode == "spawn-child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        info["child_pid"] = child.pid
    ready = Path(args.ready_file)
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, ready)
    print(f"fake {name} ready: {info}", flush=True)
    stop.wait()
    print(f"fake {name} stopping", flush=True)
    return 0
