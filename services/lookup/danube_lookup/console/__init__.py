"""The web console: a single-page app and its JSON API (a proxy to this lookup's admin API),
served on the lookup's HTTP endpoint. See docs/console.md."""

from danube_lookup.console.server import Console

__all__ = ["Console"]
