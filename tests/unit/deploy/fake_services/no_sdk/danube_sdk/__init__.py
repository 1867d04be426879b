"""Stands in for a missing SDK: importing it fails, as if danube_sdk were not installed."""

raise ImportError("danube_sdk is hidden in this test")
