"""Parsers for what the RDMA tools and nvidia-smi print: each a pure function from the
tool's text to plain data, so that a live host, a capture (bench/device_network_capture.sh)
and published output read alike. A line a parser does not know is skipped, never guessed
at: tools add fields between versions.

Formats, as the tools print them (examples in tests/fixtures/network/*/text/):
- `ibstat`: "CA 'mlx5_0'" blocks, "Port 1:" sub-blocks, "Key: value" lines (infiniband-diags).
- `ibv_devinfo -v`: "hca_id: NAME" blocks, "port: N" sub-blocks (rdma-core).
- `rdma link show`: "link DEV/PORT state S physical_state P netdev IF" (iproute2).
- `fi_info -l`: "provider:" headings; `fi_info -p efa`: "provider: efa" records (libfabric).
- `nvidia-smi topo -m`: the matrix, and its "NIC Legend" mapping NICn to device names.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# "400 Gb/sec (4X NDR)" (sysfs, ibstatus), "400" (ibstat), "10 (FDR10)" (older ibstat)
_RATE = re.compile(r"^\s*(?P<gbps>\d+(?:\.\d+)?)\s*(?:Gb/sec)?\s*(?:\((?P<detail>[^)]*)\))?\s*$")
_WIDTH = re.compile(r"^(?P<width>\d+X)\s*(?P<speed>\S+)?$")
# ibv_devinfo -v: "active_width: 4X (2)", "active_speed: 100.0 Gbps (64)"
_LANES = re.compile(r"^(\d+)X")
_LANE_GBPS = re.compile(r"^(\d+(?:\.\d+)?)\s*Gbps")
_TOPO_LEVELS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")


def parse_rate(text: Optional[str]) -> Tuple[Optional[float], Optional[str], Optional[str]]:
    """"400 Gb/sec (4X NDR)" -> (400.0, "4X", "NDR"); "400" -> (400.0, None, None);
    unreadable -> (None, None, None)."""
    if not text:
        return None, None, None
    match = _RATE.match(text)
    if not match:
        return None, None, None
    width = speed = None
    detail = (match.group("detail") or "").strip()
    if detail:
        parts = _WIDTH.match(detail)
        if parts:
            width, speed = parts.group("width"), parts.group("speed")
        else:
            speed = detail
    return float(match.group("gbps")), width, speed


def _key_values(lines: List[str]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for line in lines:
        key, sep, value = line.strip().partition(":")
        if sep:
            out.setdefault(key.strip().lower(), value.strip())
    return out


def parse_ibstat(text: str) -> List[Dict[str, Any]]:
    """Each CA: {"name", "ca_type", "firmware", "ports": [{"port", "state",
    "physical_state", "rate_gbps", "link_layer"}]}. A block cut short keeps what it has."""
    cas: List[Dict[str, Any]] = []
    ca: Optional[Dict[str, Any]] = None
    port: Optional[Dict[str, Any]] = None
    for raw in text.splitlines():
        line = raw.strip()
        head = re.match(r"^CA '([^']+)'$", line)
        if head:
            ca = {"name": head.group(1), "ca_type": None, "firmware": None, "ports": []}
            cas.append(ca)
            port = None
            continue
        if ca is None:
            continue
        number = re.match(r"^Port (\d+):$", line)
        if number:
            port = {"port": int(number.group(1)), "state": None, "physical_state": None,
                    "rate_gbps": None, "link_layer": None}
            ca["ports"].append(port)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if port is None:
            if key == "ca type":
                ca["ca_type"] = value or None
            elif key == "firmware version":
                ca["firmware"] = value or None
        elif key == "state":
            port["state"] = value or None
        elif key == "physical state":
            port["physical_state"] = value or None
        elif key == "rate":
            port["rate_gbps"] = parse_rate(value)[0]
        elif key == "link layer":
            port["link_layer"] = value or None
    return cas


def _state_word(value: str) -> str:
    """"PORT_ACTIVE (4)" -> "Active"; "4: ACTIVE" -> "Active"; "LinkUp" stays."""
    word = re.sub(r"\(\d+\)", "", value).strip()
    word = word.split(":", 1)[-1].strip()
    word = re.sub(r"^PORT_", "", word)
    return word.capitalize() if word.isupper() else word


def parse_ibv_devinfo(text: str) -> List[Dict[str, Any]]:
    """Each hca_id: {"name", "transport", "firmware", "vendor_id", "vendor_part_id",
    "board_id", "ports": [{"port", "state", "link_layer", "width", "rate_gbps"}]};
    the rate is lanes x per-lane speed where `-v` printed both."""
    devices: List[Dict[str, Any]] = []
    device: Optional[Dict[str, Any]] = None
    port: Optional[Dict[str, Any]] = None
    for raw in text.splitlines():
        line = raw.strip()
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "hca_id":
            device = {"name": value, "transport": None, "firmware": None, "vendor_id": None,
                      "vendor_part_id": None, "board_id": None, "ports": []}
            devices.append(device)
            port = None
        elif device is None:
            continue
        elif key == "port" and value.isdigit():
            port = {"port": int(value), "state": None, "link_layer": None, "width": None,
                    "rate_gbps": None, "_lanes": None, "_lane_gbps": None}
            device["ports"].append(port)
        elif port is None:
            field = {"transport": "transport", "fw_ver": "firmware", "vendor_id": "vendor_id",
                     "vendor_part_id": "vendor_part_id", "board_id": "board_id"}.get(key)
            if field:
                device[field] = value or None
        elif key == "state":
            port["state"] = _state_word(value)
        elif key == "link_layer":
            port["link_layer"] = value or None
        elif key == "active_width":
            lanes = _LANES.match(value)
            if lanes:
                port["_lanes"] = int(lanes.group(1))
                port["width"] = f"{lanes.group(1)}X"
        elif key == "active_speed":
            per_lane = _LANE_GBPS.match(value)
            if per_lane:
                port["_lane_gbps"] = float(per_lane.group(1))
    for device in devices:
        for port in device["ports"]:
            lanes, per_lane = port.pop("_lanes"), port.pop("_lane_gbps")
            if lanes and per_lane:
                port["rate_gbps"] = lanes * per_lane
    return devices


def parse_rdma_link(text: str) -> List[Dict[str, Any]]:
    """Each line: {"device", "port", "state", "physical_state", "netdev"}."""
    links: List[Dict[str, Any]] = []
    for raw in text.splitlines():
        match = re.match(r"^\s*link\s+(\S+)/(\d+)\s+(.*)$", raw)
        if not match:
            continue
        words = match.group(3).split()
        # key value pairs; indexed, not zip(strict=...): the agent runs on Python 3.8
        fields = {words[i]: words[i + 1] for i in range(0, len(words) - 1, 2)}
        links.append({"device": match.group(1), "port": int(match.group(2)),
                      "state": fields.get("state"),
                      "physical_state": fields.get("physical_state"),
                      "netdev": fields.get("netdev")})
    return links


def parse_fi_info(text: str) -> Dict[str, Any]:
    """`fi_info -l` -> {"providers": [...]}; `fi_info -p efa` -> {"domains": [{"provider",
    "fabric", "domain", "type"}]}; both keys are always present."""
    providers: List[str] = []
    domains: List[Dict[str, Optional[str]]] = []
    record: Optional[Dict[str, Optional[str]]] = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep:
            continue
        if key == "provider":
            record = {"provider": value, "fabric": None, "domain": None, "type": None}
            domains.append(record)
        elif not value and raw[:1] not in (" ", "\t") and re.match(r"^[\w;.-]+$", key):
            providers.append(line[:-1])
        elif record is not None and key in ("fabric", "domain", "type"):
            record[key] = value or None
    return {"providers": providers, "domains": domains}


def efa_device(domain: Optional[str]) -> Optional[str]:
    """libfabric's domain "efa_0-rdm" / "rdmap16s27-dgrm" names the verbs device."""
    if not domain:
        return None
    return re.sub(r"-(rdm|dgrm)$", "", domain)


def parse_topo(text: str) -> Dict[str, Any]:
    """`nvidia-smi topo -m`: {"gpus": {index: {"numa_node": int or None}},
    "nics": {device name: {gpu index: level}}}. NICs are named by the "NIC Legend" where
    it is printed (NIC0: mlx5_0), else by the column heading (older drivers head the
    column with the device name itself)."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    legend: Dict[str, str] = {}
    for line in lines:
        match = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if match:
            legend[match.group(1)] = match.group(2)
    columns: Optional[List[str]] = None
    gpus: Dict[int, Dict[str, Any]] = {}
    nics: Dict[str, Dict[int, str]] = {}
    for line in lines:
        tokens = line.split()
        if columns is None:
            # the heading row starts "GPU0 GPU1 ..."; the first data row "GPU0 X ..."
            if tokens and tokens[0] == "GPU0" and (len(tokens) < 2 or tokens[1] != "X"):
                columns = []
                for token in tokens:
                    if token == "CPU":
                        break
                    columns.append(token)
            continue
        row = re.match(r"^GPU(\d+)\s", line)
        if not row:
            if line.startswith("Legend"):
                break
            continue
        index = int(row.group(1))
        values = tokens[1:1 + len(columns)]
        # after the matrix: CPU affinity, then NUMA affinity ("N/A" where none)
        rest = tokens[1 + len(columns):]
        numa = int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else None
        gpus[index] = {"numa_node": numa}
        for at, value in enumerate(values):
            column = columns[at]
            if column.startswith("GPU"):
                continue
            name = legend.get(column, column)
            if value in _TOPO_LEVELS:
                nics.setdefault(name, {})[index] = value
    return {"gpus": gpus, "nics": nics}


def parse_modules(text: str) -> List[str]:
    """/proc/modules (or the capture's cut of it): the module names, first column."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def parse_kernel(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """"6.18.44-fc-v657-gpu" -> (6, 18)."""
    match = re.match(r"^\s*(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_nvidia_module(text: Optional[str]) -> Optional[str]:
    """/proc/driver/nvidia/version: "open" for the open kernel modules ("NVIDIA UNIX Open
    Kernel Module"), "proprietary" for the others, None when it does not say."""
    for line in (text or "").splitlines():
        if line.startswith("NVRM version:"):
            return "open" if "Open Kernel Module" in line else "proprietary"
    return None
