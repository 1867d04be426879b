"""``danube-leader``: leader election per named role, as a gRPC service backed by etcd."""
