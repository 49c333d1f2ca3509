"""The standard harness's matmul (`harness.py`), with what only it uses: the window-median
steady-state test (`steady.py`) and the bit-for-bit check of the product under load
(`integrity.py`).
"""
