"""A short figure measured again without the run's settings that can move it (issue 44):
the layer above the suites (docs/reruns.md).

One protocol (protocol.py: what is short, what the child measures, what goes on each
original), one set of bounds (bounds.py), one child (child.py: the agent's own Python
running a suite's own functions, never the whole collect), and one module per suite's
rerun, each registering what its child measures: matmul.py, job.py, memory.py, links.py,
allreduce.py (whose "child" is the all-reduce's own ranks). node.py hands the node
suite its three.
"""
