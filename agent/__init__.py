"""The fleet agent: runs on a GPU host, fingerprints and benchmarks, prints JSON lines.

Standard library and NVIDIA's pynvml only, on any Python from 3.8; torch is imported by
the matmul harness and the node suite alone.
"""

__version__ = "0.1.0"
DOCUMENT_FORMAT = "fleet-agent/1"
