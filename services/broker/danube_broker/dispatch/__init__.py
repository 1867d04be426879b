"""Dispatch: routing per subscription type (one module each) and the delivery paths using them.

``base`` holds the router interface; ``exclusive``, ``shared``, ``failover`` and ``key_shared``
decide which consumer gets which message; ``queue`` is a consumer's bounded batch queue;
``non_reliable`` delivers at-most-once into those queues. A reliable (WAL-backed) path goes
beside ``non_reliable`` and reuses the routers.
"""
