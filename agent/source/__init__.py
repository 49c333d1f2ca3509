"""Where the agent's NVML answers come from: the live driver, a recording being written or
replayed (`nvml.py`), and nvidia-smi's `-q` text or `-q -x` XML converted into a recording
(`smi.py`, with its health sections in `smi_health.py`), so that every reader of a GPU takes
one code path whatever the source.
"""
