"""Whether a card is failing, or has been: the counters its driver keeps and the verdict on
them (`card.py`, with the verdict's rule in words), and the kernel log's Xid codes by what
they point at and what a buyer asks for (`xid.py`).
"""
