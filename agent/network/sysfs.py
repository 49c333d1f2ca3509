"""Network interfaces, RDMA devices and NVIDIA GPUs as sysfs shows them, read from a root:
"/" on a live host, or a capture's `sys` folder (bench/device_network_capture.sh), where
each file sits under its own absolute path and each symlink is recorded as text in
`<path>.link` (its `readlink -f`). The same code reads both: a real symlink is resolved,
a `.link` file is read.

Files read, per interface (/sys/class/net/IF): type, operstate, speed (Mb/s, -1 where the
driver does not say), mtu, carrier, and of its PCI device numa_node, vendor, device,
current_link_speed/width; the interface's own link says whether it is virtual
(/sys/devices/virtual/...) and where it sits on PCI; device/driver names the driver.
Per RDMA device (/sys/class/infiniband/DEV): node_type, fw_ver, hca_type, board_id, its
PCI device's numa_node, vendor, device, the driver, ports/N/{state, phys_state, rate,
link_layer}, and the interfaces under device/net. Per GPU bound to the nvidia driver
(/sys/bus/pci/drivers/nvidia/ADDRESS): its link and numa_node.

Standard library only, Python 3.8. Reads only.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_READ_LIMIT = 4096


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def read(root: str, path: str) -> Optional[str]:
    """A sysfs file's text, stripped; None if absent or unreadable (some attributes
    raise EINVAL when the link is down: `speed` on many drivers)."""
    try:
        with open(_under(root, path), encoding="utf-8", errors="replace") as fh:
            return fh.read(_READ_LIMIT).strip()
    except OSError:
        return None


def resolve(root: str, path: str) -> Optional[str]:
    """Where a sysfs symlink points, as an absolute path on the host; None if it is no
    link. A capture stores the target in `<path>.link`."""
    full = _under(root, path)
    if os.path.islink(full):
        target = os.path.realpath(full)
        # a live root is "/"; a root elsewhere holding real links keeps host paths too
        return target[len(root.rstrip("/")):] if root not in ("", "/") and \
            target.startswith(root.rstrip("/") + "/") else target
    recorded = read(root, path + ".link")
    return recorded or None


def entries(root: str, path: str) -> List[str]:
    """Names in a sysfs folder, live or captured (`NAME.link` files count as NAME)."""
    try:
        names = os.listdir(_under(root, path))
    except OSError:
        return []
    out = {name[:-5] if name.endswith(".link") else name for name in names}
    return sorted(out)


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def _numa(text: Optional[str]) -> Optional[int]:
    node = _int(text)
    # a one-node host (or a VM that hides it) says -1
    return node if node is not None and node >= 0 else None


def pci_address(path: Optional[str]) -> Optional[str]:
    """The last PCI function on a device path, "0000:00:03.0" in
    /sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0."""
    if not path:
        return None
    found = [part for part in path.split("/") if _BDF.match(part)]
    return found[-1] if found else None


def _basename(path: Optional[str]) -> Optional[str]:
    return os.path.basename(path.rstrip("/")) if path else None


def read_interfaces(root: str = "/") -> List[Dict[str, Any]]:
    """Every /sys/class/net interface: {"name", "path", "virtual", "type", "operstate",
    "speed_mbps", "mtu", "carrier", "driver", "pci_address", "numa_node", "vendor",
    "device", "device_path"}."""
    out: List[Dict[str, Any]] = []
    for name in entries(root, "/sys/class/net"):
        base = f"/sys/class/net/{name}"
        path = resolve(root, base)
        device_path = resolve(root, base + "/device")
        speed = _int(read(root, base + "/speed"))
        out.append({
            "name": name,
            "path": path,
            "virtual": bool(path and path.startswith("/sys/devices/virtual/")),
            "type": _int(read(root, base + "/type")),
            "operstate": read(root, base + "/operstate"),
            "speed_mbps": speed if speed is not None and speed > 0 else None,
            "mtu": _int(read(root, base + "/mtu")),
            "carrier": _int(read(root, base + "/carrier")),
            "driver": _basename(resolve(root, base + "/device/driver")),
            "pci_address": pci_address(device_path),
            "device_path": device_path,
            "numa_node": _numa(read(root, base + "/device/numa_node")),
            "vendor": read(root, base + "/device/vendor"),
            "device": read(root, base + "/device/device"),
        })
    return out


def read_rdma(root: str = "/") -> List[Dict[str, Any]]:
    """Every /sys/class/infiniband device: {"name", "path", "virtual", "node_type",
    "firmware", "hca_type", "board_id", "driver", "pci_address", "device_path",
    "numa_node", "vendor", "device", "netdevs", "ports": [{"port", "state",
    "physical_state", "rate", "link_layer"}]}."""
    out: List[Dict[str, Any]] = []
    for name in entries(root, "/sys/class/infiniband"):
        base = f"/sys/class/infiniband/{name}"
        path = resolve(root, base)
        device_path = resolve(root, base + "/device")
        ports = []
        for port in entries(root, base + "/ports"):
            if not port.isdigit():
                continue
            at = f"{base}/ports/{port}"
            ports.append({"port": int(port), "state": read(root, at + "/state"),
                          "physical_state": read(root, at + "/phys_state"),
                          "rate": read(root, at + "/rate"),
                          "link_layer": read(root, at + "/link_layer")})
        out.append({
            "name": name,
            "path": path,
            # soft-RoCE (rxe) and soft-iWARP (siw) hang off no bus of their own
            "virtual": bool(path and path.startswith("/sys/devices/virtual/")),
            "node_type": read(root, base + "/node_type"),
            "firmware": read(root, base + "/fw_ver"),
            "hca_type": read(root, base + "/hca_type"),
            "board_id": read(root, base + "/board_id"),
            "driver": _basename(resolve(root, base + "/device/driver")),
            "pci_address": pci_address(device_path),
            "device_path": device_path,
            "numa_node": _numa(read(root, base + "/device/numa_node")),
            "vendor": read(root, base + "/device/vendor"),
            "device": read(root, base + "/device/device"),
            "netdevs": entries(root, base + "/device/net"),
            "ports": sorted(ports, key=lambda p: p["port"]),
        })
    return out


def read_gpus(root: str = "/") -> List[Dict[str, Any]]:
    """NVIDIA GPUs bound to the nvidia driver, in PCI order (nvidia-smi's default index
    order): {"index", "pci_address", "path", "numa_node"}."""
    base = "/sys/bus/pci/drivers/nvidia"
    found = [name for name in entries(root, base) if _BDF.match(name)]
    # the nvidia driver also binds NVSwitches on HGX boards: display controllers only
    found = [name for name in found
             if (read(root, f"{base}/{name}/class") or "0x03").startswith("0x03")]
    out = []
    for index, address in enumerate(sorted(found)):
        out.append({"index": index, "pci_address": address,
                    "path": resolve(root, f"{base}/{address}"),
                    "numa_node": _numa(read(root, f"{base}/{address}/numa_node"))})
    return out
