"""Benchmark drivers: one per system, all implementing bench.drivers.base.Driver.

A driver is found by its ``name``: every module in this package is imported and its ``Driver``
subclasses collected, so adding a driver means adding a module. A module that cannot be imported
(its client library is not installed) is reported with the drivers that could not be found.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from bench.drivers.base import Driver, DriverUnavailable

__all__ = ["Driver", "DriverUnavailable", "discover", "make_driver"]

ORDER = [
    "danube",
    "danube-nomux",
    "danube-none",
    "danube-cloud",
    "danube-tls",
    "danube-secure",
    "danube-client",
    "raw-grpc",
    "nats-jetstream",
    "nats-js-subjects",
    "nats-core",
    "rabbitmq",
    "redis-streams",
    "redis-streams-everysec",
]


def discover() -> tuple[dict[str, type[Driver]], dict[str, str]]:
    """({driver name: class}, {module: import error}) over this package's modules."""
    found: dict[str, type[Driver]] = {}
    broken: dict[str, str] = {}
    for mod in pkgutil.iter_modules(__path__):
        if mod.name in ("base",) or mod.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{__name__}.{mod.name}")
        except Exception as exc:  # a peer's client library missing: say so, keep the rest
            broken[mod.name] = f"{type(exc).__name__}: {exc}"
            continue
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Driver) and not inspect.isabstract(obj) and getattr(obj, "name", None):
                found.setdefault(obj.name, obj)
    return found, broken


def make_driver(name: str, **options: object) -> Driver:
    """A driver by name; ``options`` go to its constructor (e.g. ``brokers=2`` for Danube's)."""
    found, broken = discover()
    if name not in found:
        hint = f"; modules that failed to import: {broken}" if broken else ""
        raise DriverUnavailable(f"no driver named {name!r} (have {sorted(found)}){hint}")
    return found[name](**options)


def known_names() -> list[str]:
    found, _ = discover()
    return sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
