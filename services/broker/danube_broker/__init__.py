"""Danube broker: owns topics assigned to it in etcd and serves their producers and consumers."""
