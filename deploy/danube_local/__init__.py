"""danube-local: run etcd, the lookup service and brokers as local processes (no Docker needed)."""

from danube_local.cluster import ClusterError, LocalCluster, ServiceFailed, ServiceProcess

__all__ = ["ClusterError", "LocalCluster", "ServiceFailed", "ServiceProcess"]
