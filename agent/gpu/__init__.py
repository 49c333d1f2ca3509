"""What the GPUs and their host are: one GPU's fingerprint (`fingerprint.py`), the variant
catalog and classifier (`variants.py`), the tenant's may-change verdicts (`capabilities.py`),
the published link figures (`links.py`), the NVLink topology (`nvlink.py`), where a GPU sits
among the host's CPUs and memory (`numa.py`), and the host's own facts (`host.py`). Reading
identity and topology only: nothing here times anything.
"""
