"""The host's limits a job meets (issue 58): CPUs and memory the run may use, the CPU
governor, NUMA, cgroup limits, /dev/shm, the locked-memory limit, huge pages, IOMMU and
PCIe ACS above the GPUs and fabric NICs, the time to import torch, whether the tenant
may profile or change vboost, and the versions of the software the provider patches
(`limits.py` parses and reads, `acs.py` the PCI config space, `software.py` the
versions, `document.py` the document's block). Reads only: nothing is set.
"""
