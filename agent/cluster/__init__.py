"""One step of the cluster probe on this node (docs/cluster.md, `fleet-cluster/1`): the
command that starts the node's ranks and reports (`step.py`), its command line
(`options.py`), one rank (`rank.py`), and what NCCL's log says the ranks went through
(`nccl_log.py`)."""
