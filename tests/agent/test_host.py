"""Host facts: each parser against real-looking raw answers, the platform verdict against
every case under tests/fixtures/host/platform, the torch probe against real child
interpreters, and the whole module on this machine and under Python 3.8.

Adding a platform case is adding a JSON file (raw signals and the expected verdict), not a
test function.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import venv
from pathlib import Path
from typing import Any

import pytest

from agent.gpu import host
from fleet.model.document import Host
from tests.conftest import FIXTURES, ROOT

CASES_DIR = FIXTURES / "host"
PLATFORM_CASES = sorted(p.stem for p in (CASES_DIR / "platform").glob("*.json"))

# The host part of the fleet-agent/1 document, in the order the agent writes it.
FACT_KEYS = [
    "hostname", "os", "os_id", "kernel", "arch", "cpu_model", "cpu_count", "memory_total_mib",
    "platform", "hypervisor", "container", "virtualization_evidence",
    "python_version", "python_executable",
    "torch_version", "cuda_runtime_version", "cudnn_version", "cublas_version", "torch_error",
    "is_root", "user",
]
NO_TORCH = {"torch_version": None, "cuda_runtime_version": None, "cudnn_version": None,
            "cublas_version": None}


def platform_case(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(VirtSignals keyword arguments, expected verdict) of one case file."""
    case = json.loads((CASES_DIR / "platform" / f"{name}.json").read_text())
    signals = dict(case["signals"])
    if "cpuinfo_file" in signals:
        signals["cpuinfo"] = (CASES_DIR / "cpuinfo" / signals.pop("cpuinfo_file")).read_text()
    return signals, case["expected"]


# --- parsers --------------------------------------------------------------------------------

# file under os-release/ -> (PRETTY_NAME, ID, VERSION_ID)
OS_RELEASE = {
    "debian-12": ("Debian GNU/Linux 12 (bookworm)", "debian", "12"),
    "ubuntu-22.04": ("Ubuntu 22.04.4 LTS", "ubuntu", "22.04"),
    "rhel-9.4": ("Red Hat Enterprise Linux 9.4 (Plow)", "rhel", "9.4"),
    "amzn-2023": ("Amazon Linux 2023.4.20240611", "amzn", "2023"),
    "alpine-3.20": ("Alpine Linux v3.20", "alpine", "3.20.0"),
    "hand-edited": (None, "lab-os", None),
}


@pytest.mark.parametrize("name", sorted(OS_RELEASE))
def test_os_release(name: str) -> None:
    parsed = host.parse_os_release((CASES_DIR / "os-release" / name).read_text())
    got = (parsed.get("PRETTY_NAME"), parsed.get("ID"), parsed.get("VERSION_ID"))
    assert got == OS_RELEASE[name]


def test_os_release_quoting_and_junk() -> None:
    # Single quotes, an escaped quote, an unterminated quote kept as written; a comment, a
    # line with no assignment and one with blanks around "=" dropped.
    parsed = host.parse_os_release((CASES_DIR / "os-release" / "hand-edited").read_text())
    assert parsed == {"NAME": "Lab OS", "ID": "lab-os", "VERSION": '1.0 "edge"',
                      "VARIANT": "unterminated"}


# file under cpuinfo/ -> (model name, hypervisor flag)
CPUINFO = {
    "epyc-7r13-kvm.txt": ("AMD EPYC 7R13 Processor", True),
    "xeon-8480cl-baremetal.txt": ("Intel(R) Xeon(R) Platinum 8480CL", False),
    "firecracker-epyc-sandbox.txt": ("AMD EPYC", True),
    "grace-aarch64.txt": (None, None),
}


@pytest.mark.parametrize("name", sorted(CPUINFO))
def test_cpuinfo(name: str) -> None:
    text = (CASES_DIR / "cpuinfo" / name).read_text()
    assert (host.parse_cpu_model(text), host.cpuinfo_hypervisor_flag(text)) == CPUINFO[name]


MEMINFO = [
    ("MemTotal:       2113412396 kB\nMemFree:        2051234560 kB\n"
     "MemAvailable:   2068123456 kB\nSwapTotal:             0 kB\n", 2063879),
    ("MemTotal:       24682416 kB\n", 24103),
    ("MemFree:        24682416 kB\nSwapTotal:       1048576 kB\n", None),
    ("MemTotal:       lots kB\n", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "mib"), MEMINFO)
def test_meminfo_total(text: str, mib: int | None) -> None:
    assert host.parse_meminfo_total_mib(text) == mib


@pytest.mark.parametrize(("stdout", "answer"), [
    ("kvm\n", "kvm"),
    ("none\n", "none"),
    ("container-other\n", "container-other"),
    ("systemd-nspawn\n", "systemd-nspawn"),
    ("", None),
    ("Failed to check for virtualization: Permission denied\n", None),
    ("kvm\ndocker\n", None),
])
def test_detect_virt_output(stdout: str, answer: str | None) -> None:
    assert host.parse_detect_virt(stdout) == answer


def dmi(vendor: str, product: str, bios: str) -> dict[str, str]:
    return {"sys_vendor": vendor, "product_name": product, "bios_vendor": bios}


DMI = {
    "aws-nitro": (dmi("Amazon EC2", "p5.48xlarge", "Amazon EC2"), ("amazon", "sys_vendor")),
    "aws-metal": (dmi("Amazon EC2", "g4dn.metal", "Amazon EC2"), ("none", "product_name")),
    "aws-xen": (dmi("Xen", "HVM domU", "Xen"), ("xen", "sys_vendor")),
    "gcp": (dmi("Google", "Google Compute Engine", "Google"), ("google", "product_name")),
    "azure": (dmi("Microsoft Corporation", "Virtual Machine", "Microsoft Corporation"),
              ("microsoft", "product_name")),
    "kvm-rhev": (dmi("Red Hat", "KVM", "SeaBIOS"), ("kvm", "product_name")),
    "openstack": (dmi("OpenStack Foundation", "OpenStack Nova", "SeaBIOS"),
                  ("kvm", "product_name")),
    "qemu": (dmi("QEMU", "Standard PC (Q35 + ICH9, 2009)", "EDK II"), ("qemu", "sys_vendor")),
    "vmware": (dmi("VMware, Inc.", "VMware7,1", "VMware, Inc."), ("vmware", "product_name")),
    "virtualbox": (dmi("innotek GmbH", "VirtualBox", "innotek GmbH"),
                   ("oracle", "product_name")),
    # Physical machines whose vendors also make hypervisors: nothing said.
    "surface-laptop": (dmi("Microsoft Corporation", "Surface Laptop 5", "Microsoft Corporation"),
                       (None, None)),
    "chromebook": (dmi("Google", "Eve", "coreboot"), (None, None)),
    "oracle-server": (dmi("Oracle Corporation", "ORACLE SERVER X9-2", "American Megatrends Inc."),
                      (None, None)),
    "dgx": (dmi("NVIDIA", "DGXH100", "American Megatrends International, LLC."), (None, None)),
    "none": ({}, (None, None)),
}


@pytest.mark.parametrize("name", sorted(DMI))
def test_hypervisor_from_dmi(name: str) -> None:
    values, expected = DMI[name]
    assert host.hypervisor_from_dmi(values) == expected


DOCKER_ID = "3f1d2b6c8a9e4f0b7c5d1e2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e"
KUBE = "/kubepods/burstable/pod8d3c1f6e-2b4a-4c7d-9e1f-0a2b3c4d5e6f/" + DOCKER_ID
CGROUP = {
    "v1-docker": (f"12:pids:/docker/{DOCKER_ID}\n11:memory:/docker/{DOCKER_ID}\n0::/\n",
                  ("docker", f"/docker/{DOCKER_ID}")),
    "v1-kubepods": (f"12:hugetlb:{KUBE}\n1:name=systemd:{KUBE}\n", ("kubernetes", KUBE)),
    "v2-docker-systemd-driver": (f"0::/system.slice/docker-{DOCKER_ID}.scope\n",
                                 ("docker", f"/system.slice/docker-{DOCKER_ID}.scope")),
    "v2-podman-rootless": (
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{DOCKER_ID}.scope"
        "/container\n",
        ("podman", f"/user.slice/user-1000.slice/user@1000.service/user.slice/"
                   f"libpod-{DOCKER_ID}.scope/container")),
    "v2-lxc": ("0::/lxc.payload.gpu-box/init.scope\n",
               ("lxc", "/lxc.payload.gpu-box/init.scope")),
    "v2-nerdctl": (f"0::/system.slice/nerdctl-{DOCKER_ID}.scope\n",
                   ("containerd", f"/system.slice/nerdctl-{DOCKER_ID}.scope")),
    # A namespaced v2 container sees only its own root: no runtime named.
    "v2-namespaced": ("0::/\n", (None, None)),
    "v2-host-init": ("0::/init.scope\n", (None, None)),
    # The Docker daemon itself, on the host, is not inside a container.
    "v2-docker-daemon": ("0::/system.slice/docker.service\n", (None, None)),
    "garbage": ("not a cgroup line\n", (None, None)),
}


@pytest.mark.parametrize("name", sorted(CGROUP))
def test_container_from_cgroup(name: str) -> None:
    text, expected = CGROUP[name]
    assert host.container_from_cgroup(text) == expected


@pytest.mark.parametrize(("environ", "name"), [
    ("container=lxc\0", "lxc"),
    ("PATH=/usr/bin:/bin\0container=podman\0HOME=/root\0", "podman"),
    ("PATH=/usr/bin:/bin\0HOME=/root\0", None),
    ("container=\0", None),
    ("container=odd value;x\0", "odd_value_x"),
    ("", None),
])
def test_container_from_environ(environ: str, name: str | None) -> None:
    assert host.container_from_environ(environ) == name


# The FACP header this sandbox's Firecracker wrote (2026-11-22), and QEMU's.
FIRECRACKER_FACP = bytes.fromhex(
    "4641435014010000066646495245434b4643564d464144540000000046434154" "19012420")
QEMU_FACP = b"FACP\xf4\x00\x00\x00\x03\x00BOCHS BXPCFACP\x01\x00\x00\x00BXPC\x01\x00\x00\x00"


@pytest.mark.parametrize(("header", "oem_id"), [
    (FIRECRACKER_FACP, "FIRECK"),
    (QEMU_FACP, "BOCHS"),
    (b"FACP" + bytes(32), None),
    (b"FACP", None),
])
def test_acpi_oem_id(header: bytes, oem_id: str | None) -> None:
    assert host.parse_acpi_oem_id(header) == oem_id


@pytest.mark.parametrize(("packed", "dotted"), [
    (7605, "7.6.5"), (8902, "8.9.2"), (90100, "9.1.0"), (91002, "9.10.2")])
def test_cudnn_version(packed: int, dotted: str) -> None:
    assert host.format_cudnn_version(packed) == dotted


MARK = host.TORCH_PROBE_MARK
TORCH_OUTPUTS = {
    "cuda-build": (
        0, MARK + json.dumps({"torch_version": "2.4.1+cu124", "cuda_runtime_version": "12.4",
                              "cudnn_version": 90100, "cublas_version": "12.4.5"}) + "\n", "",
        {"torch_version": "2.4.1+cu124", "cuda_runtime_version": "12.4", "cudnn_version": "9.1.0",
         "cublas_version": "12.4.5", "torch_error": None}),
    "cpu-build-with-noise": (
        0, "[W init] NNPACK unsupported\n" + MARK + json.dumps(
            {"torch_version": "2.13.0+cpu", "cuda_runtime_version": None, "cudnn_version": None,
             "cublas_version": None}) + "\n", "UserWarning: something\n",
        {**NO_TORCH, "torch_version": "2.13.0+cpu", "torch_error": None}),
    "no-torch": (
        0, MARK + json.dumps({"error": "torch is not importable: ModuleNotFoundError: "
                                       "No module named 'torch'"}) + "\n", "",
        {**NO_TORCH, "torch_error": "torch is not importable: ModuleNotFoundError: "
                                    "No module named 'torch'"}),
    "segfault": (
        -11, "", "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent)\n",
        {**NO_TORCH, "torch_error": "torch probe was killed by signal 11 without an answer: "
                                    "Current thread 0x1 (most recent)"}),
    "traceback": (
        1, "", "Traceback (most recent call last):\n  ...\nRuntimeError: boom\n",
        {**NO_TORCH, "torch_error": "torch probe exited with status 1 without an answer: "
                                    "RuntimeError: boom"}),
    "bad-json": (0, MARK + "{not json\n", "",
                 {**NO_TORCH, "torch_error": "torch probe exited with status 0 without an answer"}),
}


@pytest.mark.parametrize("name", sorted(TORCH_OUTPUTS))
def test_parse_torch_probe(name: str) -> None:
    returncode, stdout, stderr, expected = TORCH_OUTPUTS[name]
    assert host.parse_torch_probe(returncode, stdout, stderr) == expected


# --- the platform verdict -------------------------------------------------------------------


@pytest.mark.parametrize("name", PLATFORM_CASES)
def test_platform_verdict(name: str) -> None:
    signals, expected = platform_case(name)
    assert host.classify_platform(host.VirtSignals(**signals)) == expected


def test_platform_cases_cover_every_verdict() -> None:
    verdicts = {platform_case(name)[1]["platform"] for name in PLATFORM_CASES}
    assert verdicts == {"bare-metal", "vm", "container", "vm+container", "unknown"}


# --- the torch probe, in real child interpreters --------------------------------------------


@pytest.fixture(scope="module")
def torchless_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh virtualenv's interpreter: no site-packages, so no torch."""
    folder = tmp_path_factory.mktemp("torchless")
    venv.create(folder, with_pip=False, symlinks=True)
    python = str(folder / "bin" / "python")
    found = subprocess.run([python, "-c", "import importlib.util as u; "
                            "print(u.find_spec('torch') is not None)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if found != "False":
        pytest.skip(f"{python} still finds a torch (installed in the base interpreter)")
    return python


def test_torch_probe_without_torch(torchless_python: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A "torch" folder where the agent happens to stand must not answer for the real one.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("__version__ = 'from the cwd'")
    monkeypatch.chdir(tmp_path)
    assert host.run_torch_probe(python=torchless_python) == {
        **NO_TORCH,
        "torch_error": "torch is not importable: ModuleNotFoundError: No module named 'torch'"}


def test_collect_host_facts_without_torch_probes_its_own_interpreter(
        torchless_python: str) -> None:
    script = "import json; from agent.gpu import host; print(json.dumps(host.collect_host_facts()))"
    done = subprocess.run([torchless_python, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    facts = json.loads(done.stdout)
    assert {key: facts[key] for key in [*NO_TORCH, "torch_error"]} == {
        **NO_TORCH,
        "torch_error": "torch is not importable: ModuleNotFoundError: No module named 'torch'"}
    assert facts["python_executable"] == torchless_python


# A fake torch on PYTHONPATH, shadowing any real one, for each way a probe can end. The CUDA
# major 99 has no libcublas anywhere, so the cuBLAS version comes from the package metadata
# planted beside it.
FAKE_CUDA_TORCH = """
__version__ = "2.4.1+cu999"
class version:
    cuda = "99.1"
class backends:
    class cudnn:
        @staticmethod
        def version():
            return 91002
print("[W init] noise a real torch prints")
"""
FAKE_TORCHES: dict[str, tuple[str, float, dict[str, str | None]]] = {
    "cuda-build": (FAKE_CUDA_TORCH, 30, {
        "torch_version": "2.4.1+cu999", "cuda_runtime_version": "99.1",
        "cudnn_version": "9.10.2", "cublas_version": "99.1.7.3", "torch_error": None}),
    "import-fails": ('raise OSError("libcudnn.so.9: cannot open shared object file")', 30, {
        **NO_TORCH, "torch_error": "torch is not importable: OSError: libcudnn.so.9: cannot "
                                   "open shared object file"}),
    "segfaults": ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", 30, {
        **NO_TORCH, "torch_error": "torch probe was killed by signal 11 without an answer"}),
    "exits": ("import os\nos._exit(3)", 30, {
        **NO_TORCH, "torch_error": "torch probe exited with status 3 without an answer"}),
    "hangs": ("import time\ntime.sleep(60)", 1, {
        **NO_TORCH, "torch_error": "torch probe: timed out after 1 s"}),
    # A grandchild holding stdout open would keep subprocess.run waiting for its 60 s.
    "hangs-with-grandchild": (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)", 1, {**NO_TORCH, "torch_error": "torch probe: timed out after 1 s"}),
}


@pytest.mark.parametrize("name", sorted(FAKE_TORCHES))
def test_torch_probe_with_fake_torch(name: str, tmp_path: Path) -> None:
    source, timeout, expected = FAKE_TORCHES[name]
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(source)
    dist = tmp_path / "nvidia_cublas_cu99-99.1.7.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cublas-cu99\n"
                                   "Version: 99.1.7.3\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    started = time.monotonic()
    assert host.run_torch_probe(python=sys.executable, timeout=timeout, env=env) == expected
    # Killing only the child would leave the grandchild's pipe open until its sleep of
    # 60 s ends; a busy machine takes seconds past the timeout to start and stop them.
    assert time.monotonic() - started < timeout + 30


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="no torch in this interpreter to compare the probe with")
def test_torch_probe_reads_the_installed_torch() -> None:
    result = host.run_torch_probe()
    assert result["torch_error"] is None
    assert result["torch_version"] == importlib.metadata.version("torch")


def test_torch_probe_needs_an_interpreter() -> None:
    assert host.run_torch_probe(python="/nonexistent/python3")["torch_error"] == (
        "torch probe: could not run /nonexistent/python3: [Errno 2] No such file or directory: "
        "'/nonexistent/python3'")


# --- the live machine -----------------------------------------------------------------------


def test_collect_host_facts_on_this_machine() -> None:
    facts = host.collect_host_facts(probe_torch=False)
    assert list(facts) == FACT_KEYS
    assert json.loads(json.dumps(facts)) == facts
    Host.model_validate(facts)  # the controller accepts it

    assert facts["hostname"] == socket.gethostname()
    assert facts["kernel"] == platform.release()
    assert facts["arch"] == platform.machine()
    assert facts["cpu_count"] == os.cpu_count()
    assert facts["python_version"] == platform.python_version()
    assert facts["python_executable"] == sys.executable
    assert facts["is_root"] is (os.geteuid() == 0)
    assert facts["platform"] in {"bare-metal", "vm", "container", "vm+container", "unknown"}
    assert all(isinstance(e, str) for e in facts["virtualization_evidence"])
    for key in ("os", "os_id", "cpu_model", "hypervisor", "container", "user"):
        assert facts[key] is None or isinstance(facts[key], str), key
    assert {key: facts[key] for key in [*NO_TORCH, "torch_error"]} == {
        **NO_TORCH, "torch_error": "not probed (probe_torch=False)"}

    # Independent readings of the same facts, where this machine has them.
    try:
        assert facts["os"] == platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        assert facts["os"] is None
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    assert isinstance(facts["memory_total_mib"], int)
    assert abs(facts["memory_total_mib"] - pages) <= max(1, pages // 100)
    detect = shutil.which("systemd-detect-virt")
    if detect is not None:
        said = subprocess.run([detect, "--vm"], capture_output=True, text=True).stdout.strip()
        assert ("vm" in facts["platform"].split("+")) == (said != "none")


# --- Python 3.8 -----------------------------------------------------------------------------

PY38_SCRIPT = textwrap.dedent("""
    import importlib.util, json, sys
    from agent.gpu import host
    job = json.load(sys.stdin)
    json.dump({
        "version": sys.version_info[:2],
        "has_torch": importlib.util.find_spec("torch") is not None,
        "platform": {name: host.classify_platform(host.VirtSignals(**signals))
                     for name, signals in job["platform"].items()},
        "os_release": {name: host.parse_os_release(text)
                       for name, text in job["os_release"].items()},
        "cpuinfo": {name: [host.parse_cpu_model(text), host.cpuinfo_hypervisor_flag(text)]
                    for name, text in job["cpuinfo"].items()},
        "facts": host.collect_host_facts(probe_torch=True),
    }, sys.stdout)
""")


def test_runs_on_python_38(python38: str) -> None:
    cases = {name: platform_case(name) for name in PLATFORM_CASES}
    job = {
        "platform": {name: signals for name, (signals, _) in cases.items()},
        "os_release": {name: (CASES_DIR / "os-release" / name).read_text() for name in OS_RELEASE},
        "cpuinfo": {name: (CASES_DIR / "cpuinfo" / name).read_text() for name in CPUINFO},
    }
    done = subprocess.run([python38, "-c", PY38_SCRIPT], input=json.dumps(job), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["version"] == [3, 8]
    assert out["platform"] == {name: expected for name, (_, expected) in cases.items()}
    assert {name: (p.get("PRETTY_NAME"), p.get("ID"), p.get("VERSION_ID"))
            for name, p in out["os_release"].items()} == OS_RELEASE
    assert {name: tuple(v) for name, v in out["cpuinfo"].items()} == CPUINFO
    facts = out["facts"]
    assert list(facts) == FACT_KEYS
    assert facts["hostname"] == socket.gethostname()
    assert facts["python_version"].startswith("3.8.")
    Host.model_validate(facts)
    if out["has_torch"]:
        assert facts["torch_error"] is None
    else:
        assert {key: facts[key] for key in [*NO_TORCH, "torch_error"]} == {
            **NO_TORCH,
            "torch_error": "torch is not importable: ModuleNotFoundError: No module named "
                           "'torch'"}
