"""The node suite (`suite.py`), run after the matmul: a GPU's memory bandwidth
(`memory.py`), its host link (`hostlink.py`), the copies between each pair of GPUs
(`peers.py`), the node's all-reduce (`collective.py`), and the copy timing they share
(`bandwidth.py`).
"""
