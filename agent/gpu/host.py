"""Host facts: what machine the agent runs on, under what hypervisor or container, with what
Python and torch.

Each fact has a small parser that takes the raw answer (a file's text, a command's output)
and returns plain data, so the parsers run anywhere against recorded inputs;
`collect_host_facts()` is the one place that reads the live machine. A value that cannot be
read stays None: nothing is invented.

Standard library only, on any Python from 3.8: this runs on the GPU host's own interpreter.
"""

from __future__ import annotations

import json
import os
import platform
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

# The controller refuses strings longer than its limits (fleet/model/document.py); a host is not
# trusted to keep them short, so the agent clips first rather than lose the whole document.
NAME_LIMIT = 128
TEXT_LIMIT = 256
ERROR_LIMIT = 2000
EVIDENCE_LIMIT = 64

DETECT_VIRT_TIMEOUT_S = 5.0
TORCH_PROBE_TIMEOUT_S = 30.0

# What a signal answers when it positively says "no VM here", as systemd-detect-virt does.
NO_VM = "none"

DMI_FIELDS = ("sys_vendor", "product_name", "bios_vendor")

# Prefixes of DMI values that only a hypervisor writes, after systemd's src/basic/virt.c.
# systemd's "Oracle Corporation" and a bare "Google" are left out: Oracle's physical servers
# and Chromebooks carry them too.
DMI_HYPERVISORS: Tuple[Tuple[str, str], ...] = (
    ("KVM", "kvm"),
    ("OpenStack", "kvm"),
    ("KubeVirt", "kvm"),
    ("Amazon EC2", "amazon"),
    ("QEMU", "qemu"),
    ("VMware", "vmware"),
    ("VMW", "vmware"),
    ("innotek GmbH", "oracle"),
    ("VirtualBox", "oracle"),
    ("Xen", "xen"),
    ("Bochs", "bochs"),
    ("Parallels", "parallels"),
    ("BHYVE", "bhyve"),
    ("Hyper-V", "microsoft"),
    ("Apple Virtualization", "apple"),
    ("Google Compute Engine", "google"),
)

# OEM IDs that a VMM writes into the ACPI tables it generates. Firecracker has no SMBIOS, so
# DMI is absent there and systemd-detect-virt only says "kvm"; its ACPI tables (1.8 and
# later) are the one place it names itself.
ACPI_OEM_HYPERVISORS = {"FIRECK": "firecracker", "BOCHS": "qemu"}

# Hypervisors built on KVM: when systemd-detect-virt says only "kvm" (or "qemu"), one of
# these from DMI or ACPI names the same machine more precisely instead of contradicting it.
KVM_BASED = ("amazon", "google", "firecracker")
# QEMU is the VMM that KVM accelerates: DMI says "QEMU" where systemd says "kvm", and both
# are right.
KVM_FAMILY = ("kvm", "qemu", "bochs")

# Container runtimes as they appear in cgroup paths, the orchestrator before the runtime it
# drives: a Kubernetes pod also matches its runtime's pattern.
CGROUP_CONTAINERS: Tuple[Tuple[str, str], ...] = (
    (r"kubepods", "kubernetes"),
    (r"/docker/[0-9a-f]{12,}|docker-[0-9a-f]{12,}\.scope", "docker"),
    (r"libpod-[0-9a-f]{12,}|/libpod_parent/", "podman"),
    (r"/lxc/|lxc\.payload", "lxc"),
    (r"cri-containerd-[0-9a-f]{12,}|nerdctl-[0-9a-f]{12,}", "containerd"),
    (r"crio-[0-9a-f]{12,}", "cri-o"),
)

TORCH_KEYS = ("torch_version", "cuda_runtime_version", "cudnn_version", "cublas_version")
TORCH_PROBE_MARK = "FLEET-TORCH-PROBE "

# Runs in a child interpreter so that a torch which hangs, crashes or takes 20 s to import
# costs the agent a timeout, never itself. It must run on Python 3.8 too. cuBLAS is asked
# for its own version through the library torch already loaded (dlopen by soname returns
# the loaded one); the pip package's version is the fallback.
TORCH_PROBE = r"""
import json, sys
MARK = __MARK__
def emit(doc):
    sys.stdout.write(MARK + json.dumps(doc) + "\n")
    sys.stdout.flush()
import time
started = time.perf_counter()
try:
    import torch
except BaseException as exc:
    emit({"error": "torch is not importable: %s: %s" % (type(exc).__name__, exc)})
    raise SystemExit(0)
doc = {"torch_version": str(getattr(torch, "__version__", "")) or None,
       "cuda_runtime_version": None, "cudnn_version": None, "cublas_version": None,
       "import_s": time.perf_counter() - started}
try:
    doc["cuda_runtime_version"] = torch.version.cuda
except Exception:
    pass
try:
    doc["cudnn_version"] = torch.backends.cudnn.version()
except Exception:
    pass
def cublas_version(cuda):
    major = str(cuda).split(".")[0]
    try:
        import ctypes
        lib = ctypes.CDLL("libcublas.so." + major)
        parts = []
        for prop in (0, 1, 2):
            value = ctypes.c_int()
            if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                raise OSError("cublasGetProperty failed")
            parts.append(str(value.value))
        return ".".join(parts)
    except Exception:
        pass
    try:
        from importlib import metadata
    except ImportError:
        return None
    for dist in ("nvidia-cublas-cu" + major, "nvidia-cublas"):
        try:
            return metadata.version(dist)
        except Exception:
            pass
    return None
if doc["cuda_runtime_version"]:
    doc["cublas_version"] = cublas_version(doc["cuda_runtime_version"])
emit(doc)
""".replace("__MARK__", repr(TORCH_PROBE_MARK))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _name(text: str) -> str:
    """A short token fit for a name field, from a command or file the host controls."""
    return _clip(re.sub(r"[^A-Za-z0-9._+-]", "_", text.strip()), NAME_LIMIT)


# --- parsers: raw text in, plain data out -------------------------------------------------


def parse_os_release(text: str) -> Dict[str, str]:
    """KEY=value pairs of os-release(5), values unquoted as a shell would."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        # No blanks around "=": the format is shell assignments, as os-release(5) says.
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line.strip())
        if match is None:
            continue
        key, raw = match.groups()
        try:
            value = " ".join(shlex.split(raw, comments=False, posix=True))
        except ValueError:
            # An unbalanced quote: keep what is there rather than drop the line.
            value = raw.strip().strip("\"'")
        out[key] = value
    return out


def _cpuinfo_field(cpuinfo: str, name: str) -> Optional[str]:
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == name:
            return value.strip()
    return None


def parse_cpu_model(cpuinfo: str) -> Optional[str]:
    """The first CPU's "model name"; None where the kernel gives none (most Arm hosts)."""
    model = _cpuinfo_field(cpuinfo, "model name")
    return _clip(re.sub(r"\s+", " ", model), TEXT_LIMIT) if model else None


def cpuinfo_hypervisor_flag(cpuinfo: str) -> Optional[bool]:
    """Whether the CPU flags carry `hypervisor`; None when there is no x86 flags line.

    The flag is CPUID leaf 1 ECX bit 31, which only a hypervisor sets.
    """
    flags = _cpuinfo_field(cpuinfo, "flags")
    if flags is None:
        return None
    return "hypervisor" in flags.split()


def parse_meminfo_total_mib(meminfo: str) -> Optional[int]:
    """MemTotal in MiB (the kernel reports kB, meaning KiB)."""
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB\s*$", meminfo, re.MULTILINE)
    return int(match.group(1)) // 1024 if match else None


def parse_detect_virt(stdout: str) -> Optional[str]:
    """systemd-detect-virt's answer: a technology name, "none", or None for no answer.

    It exits 1 when it prints "none", so the status says nothing; only the output counts.
    """
    lines = stdout.strip().splitlines()
    if len(lines) != 1 or not re.match(r"^[a-z0-9][a-z0-9._-]*$", lines[0].strip()):
        return None
    return lines[0].strip()


def hypervisor_from_dmi(dmi: Mapping[str, str]) -> Tuple[Optional[str], Optional[str]]:
    """(hypervisor, the DMI field that named it) from sys_vendor, product_name, bios_vendor.

    The hypervisor is NO_VM for an AWS bare-metal instance, whose DMI says "Amazon EC2"
    like a Nitro VM's does; (None, None) when no field names a hypervisor.
    """
    vendor = dmi.get("sys_vendor", "")
    product = dmi.get("product_name", "")
    if vendor.startswith("Amazon EC2") and product.endswith(".metal"):
        return NO_VM, "product_name"
    # Azure and Hyper-V; Microsoft's own laptops share the vendor but not the product.
    if vendor.startswith("Microsoft Corporation") and product == "Virtual Machine":
        return "microsoft", "product_name"
    for field in ("product_name", "sys_vendor", "bios_vendor"):
        value = dmi.get(field, "")
        for prefix, name in DMI_HYPERVISORS:
            if value.startswith(prefix):
                return name, field
    return None, None


def parse_acpi_oem_id(header: bytes) -> Optional[str]:
    """The OEM ID of an ACPI table: six bytes at offset 10 of its 36-byte header."""
    if len(header) < 16:
        return None
    oem = header[10:16].decode("ascii", errors="replace").strip(" \x00")
    return oem or None


def container_from_cgroup(text: str) -> Tuple[Optional[str], Optional[str]]:
    """(container runtime, the cgroup path that names it) from a /proc/PID/cgroup file.

    Works for v1 ("4:memory:/docker/<id>") and v2 ("0::/system.slice/docker-<id>.scope")
    lines; a namespaced v2 container sees only "0::/", which names nothing.
    """
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        for pattern, name in CGROUP_CONTAINERS:
            if re.search(pattern, path):
                return name, path
    return None, None


def container_from_environ(environ: str) -> Optional[str]:
    """The `container=` variable from a NUL-separated /proc/PID/environ, as LXC, podman and
    systemd-nspawn set it for the container's PID 1."""
    for item in environ.split("\0"):
        if item.startswith("container="):
            value = item[len("container="):].strip()
            return _name(value) if value else None
    return None


def format_cudnn_version(version: int) -> str:
    """torch.backends.cudnn.version()'s integer as major.minor.patch.

    cuDNN 9 packs it as major*10000 + minor*100 + patch (91002 is 9.10.2); cuDNN 8 and
    earlier as major*1000 + minor*100 + patch (8902 is 8.9.2).
    """
    if version >= 90000:
        major, rest = divmod(version, 10000)
    else:
        major, rest = divmod(version, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def _torch_failure(reason: str) -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {key: None for key in TORCH_KEYS}
    out["torch_error"] = _clip(reason, ERROR_LIMIT)
    return out


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def parse_torch_probe(returncode: int, stdout: str, stderr: str) -> Dict[str, Optional[str]]:
    """The torch versions (TORCH_KEYS plus torch_error) from the probe child's output."""
    doc: Any = None
    for line in stdout.splitlines():
        if line.startswith(TORCH_PROBE_MARK):
            try:
                doc = json.loads(line[len(TORCH_PROBE_MARK):])
            except ValueError:
                doc = None
    if not isinstance(doc, dict):
        if returncode < 0:
            how = f"was killed by signal {-returncode}"
        else:
            how = f"exited with status {returncode}"
        tail = _last_line(stderr)
        return _torch_failure(f"torch probe {how} without an answer"
                              + (f": {tail}" if tail else ""))
    if "error" in doc:
        return _torch_failure(str(doc["error"]))
    out: Dict[str, Optional[str]] = {}
    for key in TORCH_KEYS:
        value = doc.get(key)
        if isinstance(value, bool) or value is None:
            out[key] = None
        elif key == "cudnn_version" and isinstance(value, int):
            out[key] = format_cudnn_version(value)
        else:
            out[key] = _name(str(value))
    out["torch_error"] = None
    return out


# --- platform verdict ----------------------------------------------------------------------


@dataclass
class VirtSignals:
    """Raw answers of every virtualization signal; None (or False) where there was none."""

    detect_vm: Optional[str] = None  # systemd-detect-virt --vm, parsed
    detect_container: Optional[str] = None  # systemd-detect-virt --container, parsed
    detect_error: Optional[str] = None  # why systemd-detect-virt gave no answer
    cpuinfo: Optional[str] = None
    dmi: Optional[Dict[str, str]] = None  # None when /sys/class/dmi/id does not exist
    acpi_oem_id: Optional[str] = None
    pid1_environ: Optional[str] = None
    dockerenv: bool = False
    containerenv: bool = False
    cgroup_pid1: Optional[str] = None
    cgroup_self: Optional[str] = None


def _says(sources: Sequence[str]) -> str:
    return " and ".join(sources) + (" say" if len(sources) > 1 else " says")


def _same_hypervisor(a: str, b: str) -> bool:
    return a == b or (a in KVM_FAMILY and b in KVM_FAMILY)


def _refines(specific: str, general: str) -> bool:
    return general == "vm-other" or (general in KVM_FAMILY and specific in KVM_BASED)


def _pick_container(candidates: Sequence[Tuple[str, str]]) -> Optional[str]:
    names = [name for _, name in candidates]
    # A pod's runtime (docker, containerd) is an implementation detail of the orchestrator.
    if "kubernetes" in names:
        return "kubernetes"
    return names[0] if names else None


def classify_platform(signals: VirtSignals) -> Dict[str, Any]:
    """platform, hypervisor, container and virtualization_evidence from all the signals.

    systemd-detect-virt, when it answered, decides; the other signals decide without it
    and are listed either way. Where they disagree with it, the evidence says so. A more
    specific name for a KVM-based hypervisor (firecracker, amazon, google) refines its
    "kvm" rather than contradicting it.
    """
    evidence: List[str] = []
    conflicts: List[str] = []
    s = signals

    if s.detect_error:
        evidence.append(f"systemd-detect-virt: {s.detect_error}")
    if s.detect_vm is not None:
        evidence.append(f"systemd-detect-virt --vm: {s.detect_vm}")
    if s.detect_container is not None:
        evidence.append(f"systemd-detect-virt --container: {s.detect_container}")

    flag = cpuinfo_hypervisor_flag(s.cpuinfo) if s.cpuinfo else None
    if flag is not None:
        evidence.append("cpuinfo: hypervisor flag" if flag else "cpuinfo: no hypervisor flag")

    dmi_name: Optional[str] = None
    if s.dmi is None:
        evidence.append("dmi: /sys/class/dmi/id absent")
    else:
        dmi_name, dmi_field = hypervisor_from_dmi(s.dmi)
        for field in DMI_FIELDS:
            if field in s.dmi:
                note = ""
                if field == dmi_field:
                    note = " (bare-metal instance)" if dmi_name == NO_VM else f" ({dmi_name})"
                evidence.append(f"dmi {field}: {s.dmi[field]}{note}")

    acpi_name = ACPI_OEM_HYPERVISORS.get(s.acpi_oem_id or "")
    if s.acpi_oem_id:
        evidence.append(f"acpi oem id: {s.acpi_oem_id}" + (f" ({acpi_name})" if acpi_name else ""))

    named = [(src, name) for src, name in (("acpi", acpi_name), ("dmi", dmi_name))
             if name and name != NO_VM]
    vm_sources = [src for src, _ in named] + (["cpuinfo"] if flag else [])
    is_vm: Optional[bool]
    hypervisor: Optional[str] = None
    if s.detect_vm is not None:
        is_vm = s.detect_vm != NO_VM
        said = f"systemd-detect-virt --vm says {s.detect_vm}; trusted systemd-detect-virt"
        if not is_vm and vm_sources:
            conflicts.append(f"{_says(vm_sources)} a VM, {said}")
        if is_vm:
            hypervisor = s.detect_vm
            for src, name in named:
                if _same_hypervisor(name, s.detect_vm):
                    continue
                if _refines(name, s.detect_vm):
                    if hypervisor == s.detect_vm:
                        hypervisor = name
                    continue
                conflicts.append(f"{src} says {name}, {said}")
            if dmi_name == NO_VM:
                conflicts.append(f"dmi says a bare-metal instance, {said}")
            if flag is False:
                conflicts.append(f"cpuinfo has no hypervisor flag, {said}")
    elif vm_sources:
        is_vm = True
        hypervisor = named[0][1] if named else None
        trusted = f"trusted {' and '.join(vm_sources)}"
        if dmi_name == NO_VM:
            conflicts.append(f"dmi says a bare-metal instance, {_says(vm_sources)} a VM; {trusted}")
        if flag is False:
            conflicts.append(f"cpuinfo has no hypervisor flag, {_says(vm_sources)} a VM; {trusted}")
    elif flag is False or dmi_name == NO_VM:
        is_vm = False
    else:
        is_vm = None  # no x86 flags line, no DMI vendor, no systemd: nothing to go on

    candidates: List[Tuple[str, str]] = []
    env_name = container_from_environ(s.pid1_environ) if s.pid1_environ else None
    if env_name:
        evidence.append(f"pid 1 environ: container={env_name}")
        candidates.append(("pid 1 environ", env_name))
    if s.containerenv:
        evidence.append("/run/.containerenv present")
        candidates.append(("/run/.containerenv", "podman"))
    if s.dockerenv:
        evidence.append("/.dockerenv present")
        candidates.append(("/.dockerenv", "docker"))
    for label, text in (("pid 1", s.cgroup_pid1), ("self", s.cgroup_self)):
        runtime, path = container_from_cgroup(text or "")
        if runtime and path is not None:
            evidence.append(f"cgroup {label}: {_clip(path, 160)} ({runtime})")
            candidates.append((f"cgroup {label}", runtime))

    container: Optional[str]
    if s.detect_container is None:
        container = _pick_container(candidates)
    elif s.detect_container == "none":
        container = None
        if candidates:
            conflicts.append(f"{_says([src for src, _ in candidates])} a container, "
                             "systemd-detect-virt --container says none; "
                             "trusted systemd-detect-virt")
    elif s.detect_container == "container-other":
        container = _pick_container(candidates) or s.detect_container
    else:
        container = s.detect_container
        for src, name in candidates:
            # A pod runs in its runtime's container: "kubernetes" and "docker" both hold.
            if name not in (container, "kubernetes"):
                conflicts.append(f"{src} says {name}, systemd-detect-virt --container says "
                                 f"{container}; trusted systemd-detect-virt")

    if is_vm and container:
        verdict = "vm+container"
    elif is_vm:
        verdict = "vm"
    elif container:
        verdict = "container"
    elif is_vm is False:
        verdict = "bare-metal"
    else:
        verdict = "unknown"

    evidence += [f"disagreement: {c}" for c in conflicts]
    return {
        "platform": verdict,
        "hypervisor": _name(hypervisor) if hypervisor else None,
        "container": _name(container) if container else None,
        "virtualization_evidence": [_clip(e, TEXT_LIMIT) for e in evidence[:EVIDENCE_LIMIT]],
    }


# --- reading the live machine ------------------------------------------------------------


class Completed(NamedTuple):
    """How a command ended: its exit status and output, or why it has none."""

    returncode: Optional[int]  # None when the command did not run or did not finish
    stdout: str
    stderr: str
    error: Optional[str]  # why there is no returncode


def run_command(argv: Sequence[str], timeout: float,
                env: Optional[Mapping[str, str]] = None) -> Completed:
    """Run argv with a timeout, never raising; on timeout its whole process group dies.

    subprocess.run kills only the child and then waits for the pipes, which a grandchild
    (a torch compile worker, say) can hold open for ever; a session of its own lets the
    group go together.
    """
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd="/", env=None if env is None else dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        return Completed(None, "", "", f"could not run {argv[0]}: {exc}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            # A grandchild left the group and holds the pipes; stop reading them.
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
        return Completed(None, "", "", f"timed out after {timeout:g} s")
    return Completed(proc.returncode, out.decode("utf-8", "replace"),
                     err.decode("utf-8", "replace"), None)


def _read_text(path: str, limit: int = 1 << 22) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit)
    except OSError:
        return None


def _read_bytes(path: str, limit: int) -> Optional[bytes]:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def _detect_virt(which: str) -> Tuple[Optional[str], Optional[str]]:
    """(answer, error) of `systemd-detect-virt --vm` or `--container`."""
    path = shutil.which("systemd-detect-virt",
                        path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/bin"]))
    if path is None:
        return None, "not installed"
    done = run_command([path, which], DETECT_VIRT_TIMEOUT_S)
    if done.error is not None:
        return None, f"{which}: {done.error}"
    answer = parse_detect_virt(done.stdout)
    if answer is None:
        tail = _last_line(done.stderr) or _last_line(done.stdout) or "no output"
        return None, _clip(f"{which} exited {done.returncode}: {tail}", TEXT_LIMIT)
    return answer, None


def read_dmi(folder: str = "/sys/class/dmi/id") -> Optional[Dict[str, str]]:
    """The DMI_FIELDS that have a value; None when the folder is absent (Firecracker,
    most Arm hosts)."""
    if not os.path.isdir(folder):
        return None
    out: Dict[str, str] = {}
    for field in DMI_FIELDS:
        value = _read_text(os.path.join(folder, field), 4096)
        if value is not None and value.strip():
            out[field] = _clip(value.strip(), TEXT_LIMIT)
    return out


def read_virt_signals(cpuinfo: Optional[str] = None) -> VirtSignals:
    """Every virtualization signal of this machine; unreadable ones stay None."""
    vm, vm_error = _detect_virt("--vm")
    container, container_error = _detect_virt("--container")
    # dict.fromkeys: "not installed" twice is said once.
    errors = list(dict.fromkeys(e for e in (vm_error, container_error) if e))
    header = _read_bytes("/sys/firmware/acpi/tables/FACP", 36)  # root only, usually
    oem_id = parse_acpi_oem_id(header) if header is not None else None
    environ = _read_bytes("/proc/1/environ", 1 << 16)  # root or PID 1's owner only
    return VirtSignals(
        detect_vm=vm,
        detect_container=container,
        detect_error="; ".join(errors) or None,
        cpuinfo=cpuinfo if cpuinfo is not None else _read_text("/proc/cpuinfo"),
        dmi=read_dmi(),
        acpi_oem_id=_name(oem_id) if oem_id else None,
        pid1_environ=environ.decode("utf-8", "replace") if environ is not None else None,
        dockerenv=os.path.exists("/.dockerenv"),
        containerenv=os.path.exists("/run/.containerenv"),
        cgroup_pid1=_read_text("/proc/1/cgroup", 1 << 16),
        cgroup_self=_read_text("/proc/self/cgroup", 1 << 16),
    )


def parse_import_seconds(stdout: str) -> Optional[float]:
    """How long the probe child's `import torch` took (agent/host/, issue 58)."""
    for line in stdout.splitlines():
        if line.startswith(TORCH_PROBE_MARK):
            try:
                value = json.loads(line[len(TORCH_PROBE_MARK):]).get("import_s")
            except (ValueError, AttributeError):
                return None
            return round(float(value), 3) if isinstance(value, (int, float)) else None
    return None


def run_torch_probe(python: Optional[str] = None, timeout: float = TORCH_PROBE_TIMEOUT_S,
                    env: Optional[Mapping[str, str]] = None,
                    timings: Optional[Dict[str, Optional[float]]] = None
                    ) -> Dict[str, Optional[str]]:
    """torch, CUDA runtime, cuDNN and cuBLAS versions as `python` sees them, asked in a
    child process; all None with a reason in torch_error when that fails. `timings`,
    where given, gets the child's import time as "import_torch_s": the run's first
    import of torch, timed in the one child that asks for its versions."""
    interpreter = python if python is not None else sys.executable
    if not interpreter:
        return _torch_failure("no Python executable to run the torch probe with")
    done = run_command([interpreter, "-c", TORCH_PROBE], timeout, env)
    if timings is not None:
        timings["import_torch_s"] = parse_import_seconds(done.stdout)
    if done.returncode is None:
        return _torch_failure(f"torch probe: {done.error}")
    return parse_torch_probe(done.returncode, done.stdout, done.stderr)


def _effective_user() -> Optional[str]:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        # A container may run as a uid that /etc/passwd does not list.
        return None


def collect_host_facts(probe_torch: bool = True,
                       timings: Optional[Dict[str, Optional[float]]] = None) -> Dict[str, Any]:
    """This machine's facts, JSON-serialisable; the `host` part of the fleet-agent/1
    document (fleet.model.document.Host). Missing values are None. `timings` gets the torch
    probe's import time (run_torch_probe)."""
    os_release = parse_os_release(
        _read_text("/etc/os-release") or _read_text("/usr/lib/os-release") or "")
    cpuinfo = _read_text("/proc/cpuinfo")
    meminfo = _read_text("/proc/meminfo")
    pretty = os_release.get("PRETTY_NAME")
    os_id = os_release.get("ID")
    facts: Dict[str, Any] = {
        "hostname": socket.gethostname() or None,
        "os": _clip(pretty, TEXT_LIMIT) if pretty else None,
        "os_id": _name(os_id) if os_id else None,
        "kernel": platform.release() or None,
        "arch": platform.machine() or None,
        "cpu_model": parse_cpu_model(cpuinfo) if cpuinfo else None,
        "cpu_count": os.cpu_count(),
        "memory_total_mib": parse_meminfo_total_mib(meminfo) if meminfo else None,
    }
    facts.update(classify_platform(read_virt_signals(cpuinfo)))
    facts["python_version"] = platform.python_version()
    facts["python_executable"] = _clip(sys.executable, TEXT_LIMIT) if sys.executable else None
    if probe_torch:
        facts.update(run_torch_probe(timings=timings))
    else:
        facts.update(_torch_failure("not probed (probe_torch=False)"))
    facts["is_root"] = os.geteuid() == 0
    facts["user"] = _effective_user()
    return facts
