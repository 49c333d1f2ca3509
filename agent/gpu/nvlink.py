"""The NVLink links a GPU has, where each one goes, and what joins two GPUs.

Per GPU, for each link NVML calls active: the PCI bus id of what sits at its other end
(`nvmlDeviceGetNvLinkRemotePciInfo`, pynvml's name for NVML's `..._v2` entry point; its
`busId`) and the kind of device that is (`nvmlDeviceGetNvLinkRemoteDeviceType`: a GPU, an
IBM NPU or an NVSwitch). From those facts, per pair of GPUs: how many links join them and
through what. On an NVSwitch board (HGX/DGX H100, H200, A100 8-GPU) every link of a GPU
goes to a switch and a pair can use the fewer of the two GPUs' switch links; on a
direct-connect board (a 4-GPU HGX without switches, DGX-1) a pair has only the links whose
far end is the other GPU (an HGX A100 4-GPU board: 4 of each GPU's 12).

An answer NVML did not give stays unknown. A driver or recording without the remote calls
gives links whose far end is None, and a pair whose links are None: never "no links".
Inside a VM the switches may be invisible (NCCL then assumes a switch, NVIDIA/nccl issue
#1182); here such a link is unknown unless NVML names its type.

Standard library only, Python 3.8 and newer: this runs on the GPU host.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from agent.gpu import links
from agent.source.nvml import Handle, Nvml, NvmlError, call_key

MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS in nvidia-ml-py 13; Hopper and Blackwell have 18
STATE = "nvmlDeviceGetNvLinkState"
REMOTE_PCI = "nvmlDeviceGetNvLinkRemotePciInfo"
REMOTE_TYPE = "nvmlDeviceGetNvLinkRemoteDeviceType"
# nvmlIntNvLinkDeviceType_t; NVML_NVLINK_DEVICE_TYPE_UNKNOWN (0xFF) is no answer.
REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch"}
# Link 0 answering one of these means the GPU has no NVLink; any other error (an old
# driver without the call: FUNCTION_NOT_FOUND) means NVML did not tell.
NO_NVLINK = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT")
FABRIC_WORDS = {"switch": "through NVSwitch", "direct": "directly, GPU to GPU"}
_BUS_ID = re.compile(r"^([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,4}):([0-9A-Fa-f]{1,2})\.([0-7])$")

Remote = Dict[str, Any]  # {"link": int, "remote_bus_id": str | None, "remote_type": str | None}
BusKey = Tuple[int, int, int, int]


def read(nvml: Nvml, handle: Handle, unavailable: Dict[str, str]
         ) -> Tuple[List[int], Optional[List[Remote]]]:
    """Each link's state (1 active), in link order, and the far end of each active link;
    the far ends are None when NVML did not say whether the GPU has NVLink at all.

    A call that gets no answer is noted in `unavailable` once per function, under the key
    of the first link it failed on (link 0 for the state, as before)."""
    states: List[int] = []
    for link in range(MAX_LINKS):
        try:
            states.append(int(nvml.call(handle, STATE, link)))
        except NvmlError as exc:
            if link == 0:
                unavailable[call_key(STATE, (0,))] = exc.name
                if exc.name not in NO_NVLINK:
                    return [], None
            break  # a later link's error is the end of the GPU's links
    remotes: List[Remote] = []
    for link, state in enumerate(states):
        if not state:
            continue
        pci = _ask(nvml, handle, REMOTE_PCI, link, unavailable)
        kind = _ask(nvml, handle, REMOTE_TYPE, link, unavailable)
        bus = pci.get("busId") if isinstance(pci, dict) else None
        remotes.append({
            "link": link,
            "remote_bus_id": str(bus) if bus else None,
            "remote_type": REMOTE_TYPES.get(kind) if isinstance(kind, int) else None,
        })
    return states, remotes


def _ask(nvml: Nvml, handle: Handle, fn: str, link: int, unavailable: Dict[str, str]) -> Any:
    try:
        return nvml.call(handle, fn, link)
    except NvmlError as exc:
        if not any(key.split("(")[0] == fn for key in unavailable):
            unavailable[call_key(fn, (link,))] = exc.name
        return None


def bus_key(bus_id: Any) -> Optional[BusKey]:
    """NVML's "00000000:18:00.0" (or "0000:18:00.0") as numbers, so that two spellings of
    one address compare equal; None for anything else."""
    if not isinstance(bus_id, str):
        return None
    match = _BUS_ID.match(bus_id.strip())
    if match is None:
        return None
    domain, bus, device, function = (int(g, 16) for g in match.groups())
    return domain, bus, device, function


class _Ends:
    """Where one GPU's active links go: per GPU of the node, how many reach it directly;
    how many reach an NVSwitch; and whether any went where NVML did not say."""

    def __init__(self, gpu: Dict[str, Any], node_buses: Set[BusKey]) -> None:
        self.direct: Dict[BusKey, int] = {}
        self.switch = 0
        remotes = gpu.get("nvlink_remotes")
        self.known = isinstance(remotes, list)
        for remote in remotes if isinstance(remotes, list) else []:
            key = bus_key(remote.get("remote_bus_id"))
            kind = remote.get("remote_type")
            if key is not None and key in node_buses:
                self.direct[key] = self.direct.get(key, 0) + 1
            elif kind == "switch":
                self.switch += 1
            elif kind == "ibmnpu" or (kind == "gpu" and key is not None):
                pass  # a CPU link, or a GPU outside this node: nothing a pair here uses
            else:
                # No far end, or one that is no GPU here and of no type NVML named (a
                # switch invisible in a VM, or a GPU the VM does not hold): not known.
                self.known = False


def _ends(gpus: Sequence[Dict[str, Any]]) -> List[_Ends]:
    buses = {key for key in (bus_key(g.get("pci_bus_id")) for g in gpus) if key is not None}
    return [_Ends(g, buses) for g in gpus]


def pair_links(first: Dict[str, Any], second: Dict[str, Any],
               node: Optional[Sequence[Dict[str, Any]]] = None
               ) -> Tuple[Optional[int], Optional[str]]:
    """(links, fabric) between two GPUs' fingerprints: the NVLink links joining them and
    "switch" (both reach NVSwitches: the fewer of the two GPUs' switch links) or "direct"
    (links whose far end is the other GPU); (0, None) when NVML says none joins them, and
    (None, None) when it did not say. `node` is every GPU of the node (the two by
    default): a link to a third GPU of it is then known to be no link of this pair."""
    gpus = list(node) if node else [first, second]
    if not any(g is first for g in gpus):
        gpus.append(first)
    if not any(g is second for g in gpus):
        gpus.append(second)
    ends = _ends(gpus)
    a = ends[next(i for i, g in enumerate(gpus) if g is first)]
    b = ends[next(i for i, g in enumerate(gpus) if g is second)]
    key_a, key_b = bus_key(first.get("pci_bus_id")), bus_key(second.get("pci_bus_id"))
    if not (a.known and b.known) or key_a is None or key_b is None:
        return None, None
    # Both ends count each link; where they disagree, the fewer is what both can use.
    direct = min(a.direct.get(key_b, 0), b.direct.get(key_a, 0))
    switch = min(a.switch, b.switch)
    joined = direct + switch
    if joined == 0:
        return 0, None
    return joined, "switch" if switch >= direct else "direct"


def toward_ranks(gpus: Sequence[Dict[str, Any]]) -> Optional[List[Tuple[int, int]]]:
    """Per GPU of an all-reduce, the NVLink links it can send over toward the other ranks:
    (straight to another rank, to an NVSwitch another rank also reaches). None when NVML
    did not say where some GPU's links go."""
    ends = _ends(gpus)
    keys: List[BusKey] = []
    for gpu in gpus:
        key = bus_key(gpu.get("pci_bus_id"))
        if key is None:
            return None
        keys.append(key)
    if not all(e.known for e in ends):
        return None
    usable = []
    for i, end in enumerate(ends):
        others = [j for j in range(len(gpus)) if j != i]
        direct = sum(end.direct.get(keys[j], 0) for j in others)
        switched = end.switch if any(ends[j].switch for j in others) else 0
        usable.append((direct, switched))
    return usable


def rank_figures(gpus: Sequence[Dict[str, Any]]
                 ) -> Optional[List[Tuple[Optional[float], Optional[str]]]]:
    """Per GPU of an all-reduce, one way over its NVLink toward the other ranks and its
    source; (None, None) for a GPU none of whose links reaches another rank. None when
    NVML did not say where some GPU's links go, or the GPUs' NVLink rate is not known."""
    counts = toward_ranks(gpus)
    shared = rate(gpus)
    if counts is None or shared is None:
        return None
    gen, each = shared
    figures: List[Tuple[Optional[float], Optional[str]]] = []
    # Indexed, not zip(strict=...): the agent runs on Python 3.8.
    for i, gpu in enumerate(gpus):
        direct, switched = counts[i]
        if not direct + switched:
            figures.append((None, None))
            continue
        how = [f"{switched} through NVSwitch" if switched else "",
               f"{direct} straight to other ranks" if direct else ""]
        figures.append(((direct + switched) * each, (
            f"GPU {gpu.get('index')}: {_links(direct + switched)} toward the other ranks "
            f"({', '.join(h for h in how if h)}; NVML's per-link far ends); NVIDIA product "
            f"pages: NVLink {gen}, {each:g} GB/s a link each way")))
    return figures


def _links(count: int) -> str:
    return f"{count} link" + ("" if count == 1 else "s")


def rate(gpus: Sequence[Dict[str, Any]]) -> Optional[Tuple[int, float]]:
    """(NVLink generation, GB/s a link each way) the GPUs share; None when an architecture
    is unknown or the GPUs differ."""
    known = {links.NVLINK_BY_ARCHITECTURE.get(str(g.get("architecture") or "")) for g in gpus}
    if len(known) != 1:
        return None
    return known.pop()


def pair_figure(count: int, fabric: str, gpus: Sequence[Dict[str, Any]]
                ) -> Tuple[Optional[float], Optional[str]]:
    """One way between two GPUs joined by `count` links through `fabric`, and its source."""
    shared = rate(gpus)
    if shared is None or count <= 0:
        return None, None
    gen, each = shared
    return count * each, (f"NVIDIA product pages: NVLink {gen}, {each:g} GB/s a link each "
                          f"way, {_links(count)} joining the pair {FABRIC_WORDS[fabric]} "
                          "(NVML's per-link far ends)")
