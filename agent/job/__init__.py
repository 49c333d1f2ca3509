"""The job suite (`suite.py`): what a GPU-hour buys for a real job. The decoder stack it
runs (`transformer.py`), its training step and decode step with their gates
(`train_step.py`, `decode.py`), and the load that keeps a card warm while it sets up
(`warm.py`).
"""
