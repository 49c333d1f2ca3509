"""The node's network, fingerprinted (issue 46): each RDMA device and network interface
with its link layer, state, rate, firmware, PCI address, NUMA node and PCI distance to
each GPU, and whether GPUDirect RDMA can work. Read from sysfs (`sysfs.py`) and from the
text of ibstat, ibv_devinfo, rdma link, fi_info and nvidia-smi topo -m (`texts.py`),
where present; distances (`distance.py`), GPUDirect RDMA (`gdr.py`), and one entry
function that assembles the lot (`fingerprint.py`). Reads only.
"""
