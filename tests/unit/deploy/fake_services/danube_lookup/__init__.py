"""Fake danube_lookup for launcher tests (see ../fake_service.py)."""
