"""Reliable (at-least-once) dispatch over a topic's write-ahead log.

- ``acks``: the cursor and the acks above it (pure);
- ``policy``: a subscription's failure policy (ack timeout, backoff, poison handling);
- ``pending``: the states of read-but-unacknowledged messages and their timers;
- ``engine``: one subscription: read from the log, deliver through windows, acks, redelivery;
- ``dead_letter``: the dead-letter copy and the worker publishing it;
- ``dedup``: idempotent producers (sequence ids);
- ``meta``: subscriptions, cursors and policies in etcd, fenced by the ownership epoch;
- ``retention``: where the log may be cut (pure);
- ``log_port``: what all of this needs from the WAL.

The topic-level wiring (publish path, subscription lifecycle, cursor flushing, retention
runs) is :mod:`danube_broker.reliable_topic`.
"""
