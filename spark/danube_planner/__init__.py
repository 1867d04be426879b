"""danube-planner: the PySpark driver that turns broker load reports and load history into a
cluster load report and a rebalancing plan, written back to etcd (see spark/README.md)."""

import os

# gRPC's fork handlers can kill a child between fork() and exec() while a channel is busy (gRPC
# issue #43055): Spark's JVM is started that way with the planner's etcd channel open, and then
# failed now and then with "Java gateway process exited". The planner never uses gRPC in a
# forked child, so the handlers are switched off before grpc is first imported (an explicit
# setting in the environment wins). deploy/Dockerfile sets the same for every container.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
