"""Shared library of every Danube-for-Python process: protocol, config, errors, metadata."""
