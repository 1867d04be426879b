"""The benchmark harness: OMB-style workloads run against any bench.drivers.base.Driver.

workload.py   the workload YAML -> Workload (pure), one run per producer rate
stats.py      latency samples (array of ints, microseconds) and percentiles (pure)
runner.py     drives one Driver through one workload at one rate -> RunResult (the phases)
clients.py    the producer and consumer loops and their meter (ClientSet), in whichever process runs them
workers.py    client worker processes (WorkerPool) and the harness <-> worker protocol
cpu.py        CPU seconds of processes (psutil)
report.py     the table, ratios against peers, results.json, PNG plots
"""
