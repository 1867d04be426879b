"""Fake danube_broker for launcher tests (see ../fake_service.py)."""
