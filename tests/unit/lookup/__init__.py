"""Unit tests of the lookup service and the danube-admin CLI."""
