"""danube-planner: the PySpark driver that turns broker load reports and load history into a
cluster load report and a rebalancing plan, written back to etcd (see spark/README.md)."""
