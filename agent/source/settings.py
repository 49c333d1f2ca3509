"""The settings a run measured under, each with where it came from: the agent's own
environment, the names of it that the controller set from the inventory's `env:`, and
NCCL's configuration files. Only the families below are read, never the rest of the
environment, and a value that may be a secret is withheld (its name still recorded).

A family is recorded with what it moves, as its vendor documents it:

- NCCL_*: NCCL's transports, algorithms, protocols, channels and buffers (NCCL user
  guide, "Environment Variables"): the node's all-reduce. NCCL_DEBUG* only say where and
  how much NCCL logs (the ranks set their own), and NCCL_VERSION is a container's label
  that NCCL never reads.
- CUDA_*: the driver's and runtime's behaviour (CUDA C++ Programming Guide, "CUDA
  Environment Variables"): CUDA_LAUNCH_BLOCKING serialises launches,
  CUDA_DEVICE_MAX_CONNECTIONS bounds the hardware queues, CUDA_MPS_* share a GPU with
  other clients, CUDA_AUTO_BOOST its clocks: every figure on a GPU. CUDA_VISIBLE_DEVICES
  and CUDA_DEVICE_ORDER only choose the GPUs (placement, labelled on each figure); the
  cache and module-loading ones change start-up time only; CUDA_VERSION, CUDA_HOME and
  CUDA_PATH are a container's or toolkit's labels.
- CUBLAS_*, CUBLASLT_*, NVIDIA_TF32_OVERRIDE: cuBLAS's workspace, heuristics and math
  mode (cuBLAS documentation, "cuBLAS Environment Variables"; NVIDIA_TF32_OVERRIDE=0
  turns TF32 off in every library, NVIDIA's TF32 note): the matmul and the job.
- CUDNN_*: cuDNN's logging and heuristics (cuDNN API reference, "Environment
  Variables"): the job's attention. CUDNN_VERSION is a container's label.
- TORCH_*, PYTORCH_*: PyTorch's own switches (PyTorch documentation, "Torch
  Environment Variables", "CUDA Environment Variables", torch.distributed's
  TORCH_NCCL_* and TORCH_DISTRIBUTED_*): the process group's (the all-reduce), the
  caching allocator's (PYTORCH_CUDA_ALLOC_CONF) and the kernels' (TORCH_BLAS_PREFER_
  CUBLASLT ...): the matmul and the job. PYTORCH_VERSION, TORCH_CUDA_ARCH_LIST and the
  cache directories are labels or build-time.
- NVSHMEM_*: NVSHMEM's (NVSHMEM documentation, "Environment Variables"); nothing fleet
  measures uses it, recorded because the lent machines set NVSHMEM_DISABLE_NVLS.
- OMP_NUM_THREADS: the host threads of each process (OpenMP specification,
  "Environment Variables"): nothing judged on a GPU.

NCCL reads its files once per process (NCCL's src/misc/param.cc, `initEnvFunc`): the
file NCCL_CONF_FILE names, else ~/.nccl.conf of the user's home in the password
database, then /etc/nccl.conf; each `NAME=VALUE` line (one starting with `#` skipped) is
set only where the name is not set yet, so the environment wins over the user's file,
which wins over /etc/nccl.conf (NCCL user guide, "Environment Variables": "/etc/nccl.conf
(for an administrator to set system-wide values)"). NCCL strips nothing (`setEnvFile`
takes the bytes before the first `=` as the name and the rest as the value): a line
`NCCL_PROTO = LL` sets a variable "NCCL_PROTO " that NCCL never reads, so a name that is
not a plain identifier is no setting of NCCL's and is not recorded (nor could the
controller store it).

Some settings fleet keeps as found in every process it starts: NCCL_NVLS_ENABLE and any
name holding NVLS or MULTICAST. NVLink multicast can put a shared host's GPUs out of
service, so a machine that turned it off keeps it off; a rerun never removes them.
"""

import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

# The figures a family moves: the node suite's kinds, "matmul" and "job".
GPU_FIGURES = ("memory_copy", "host_to_device", "device_to_host", "peer_copy", "allreduce",
               "matmul", "job")
# (family, name prefixes, exact names, what it moves)
FAMILIES: Tuple[Tuple[str, Tuple[str, ...], Tuple[str, ...], Tuple[str, ...]], ...] = (
    ("nccl", ("NCCL_",), (), ("allreduce",)),
    ("cuda", ("CUDA_",), (), GPU_FIGURES),
    ("cublas", ("CUBLAS_", "CUBLASLT_"), ("NVIDIA_TF32_OVERRIDE",), ("matmul", "job")),
    ("cudnn", ("CUDNN_",), (), ("job",)),
    ("torch", ("TORCH_", "PYTORCH_"), (), ("matmul", "job")),
    ("nvshmem", ("NVSHMEM_",), (), ()),
    ("openmp", (), ("OMP_NUM_THREADS",), ()),
)
# PyTorch's distributed switches move the all-reduce, not the kernels.
TORCH_DISTRIBUTED = ("TORCH_NCCL_", "TORCH_DISTRIBUTED_")
# Names of the families that move nothing fleet measures (the module docstring says why).
INERT = frozenset((
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_VERSION",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_VERSION", "CUDA_HOME", "CUDA_PATH",
    "CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_DISABLE", "CUDA_MODULE_LOADING",
    "CUDA_MODULE_DATA_LOADING", "CUDA_DRIVER_VERSION", "CUBLAS_VERSION", "CUDNN_VERSION",
    "PYTORCH_VERSION", "PYTORCH_BUILD_VERSION", "PYTORCH_BUILD_NUMBER", "PYTORCH_HOME",
    "TORCH_HOME", "TORCH_CUDA_ARCH_LIST", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR"))
# Labels a container image sets beside its settings (NGC's CUDA_VERSION, *_HOME): a name
# that only says where something is or which version it is moves no figure.
_INERT_SUFFIX = re.compile(r"_(VERSION|HOME|DIR|PATH)$")
# What fleet never removes from a process it starts (the module docstring says why).
_KEPT = re.compile(r"^NCCL_NVLS_ENABLE$|NVLS|MULTICAST")
# The controller lists here the names it set from the inventory's `env:`.
INVENTORY_NAMES = "FLEET_INVENTORY_ENV"
ENVIRONMENT, INVENTORY = "environment", "inventory"
NCCL_CONF = "nccl.conf:"
SYSTEM_CONF = "/etc/nccl.conf"
MAX_SETTINGS = 128
MAX_VALUE = 256
# The controller's bounds (fleet/model/settings.py): a name it can store, a source's length.
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 128
MAX_SOURCE = 512
MAX_CONF_BYTES = 64 * 1024
# A name that says it holds a secret, a URL with a user in it, or a long unbroken
# run of base64's characters with letters and digits (a token or key): the value is
# withheld. A run with a "/" must also mix cases, as random base64 does (an AWS secret
# key, "wJalrXUtnFEMI/K7MDENG/..."), so that a lower-case path is still recorded.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|AUTH|KEY")
_URL_USER = re.compile(r"://[^/\s]*@")
_TOKEN = re.compile(r"[A-Za-z0-9+/=]{32,}")


def family_of(name: str) -> Optional[str]:
    """The family `name` belongs to; None for every other variable."""
    for family, prefixes, exact, _ in FAMILIES:
        if name in exact or any(name.startswith(p) for p in prefixes):
            return family
    return None


def kept(name: str) -> bool:
    """Whether fleet keeps `name` as found in every process it starts."""
    return bool(_KEPT.search(name))


def moves(name: str, figure: str) -> bool:
    """Whether a setting named `name` can move a figure of kind `figure` (the node
    suite's kinds, "matmul", "job")."""
    if name in INERT or _INERT_SUFFIX.search(name):
        return False
    if name.startswith(TORCH_DISTRIBUTED):
        return figure == "allreduce"
    family = family_of(name)
    return any(f == family and figure in what for f, _, _, what in FAMILIES)


def withheld(name: str, value: str) -> Optional[str]:
    """Why a value is not recorded, or None where it may be."""
    if _SECRET_NAME.search(name):
        return "its name says it may be a secret"
    if len(value) > MAX_VALUE:
        return f"longer than {MAX_VALUE} characters"
    if _URL_USER.search(value):
        return "a URL with credentials"
    for run in _TOKEN.findall(value):
        if not (re.search(r"[0-9]", run) and re.search(r"[A-Za-z]", run)):
            continue
        if "/" not in run or (re.search(r"[a-z]", run) and re.search(r"[A-Z]", run)):
            return "it looks like a token or key"
    return None


def storable(name: str) -> bool:
    """Whether `name` is one the controller stores: a plain identifier of at most
    MAX_NAME characters (a longer one cut would name another setting)."""
    return len(name) <= MAX_NAME and bool(NAME.match(name))


def _source(source: str) -> str:
    # A path may hold anything but NUL; the controller takes one printable line.
    return "".join(c if c.isprintable() else "?" for c in source)[:MAX_SOURCE]


def _entry(name: str, value: str, source: str, applies: bool) -> Dict[str, Any]:
    why = withheld(name, value)
    return {"name": name, "value": None if why else value, "withheld": why,
            "source": _source(source), "family": family_of(name), "applies": applies}


def conf_files(environ: Mapping[str, str]) -> List[str]:
    """The files NCCL reads, in its order: NCCL_CONF_FILE's, else ~/.nccl.conf, then
    /etc/nccl.conf."""
    named = environ.get("NCCL_CONF_FILE", "")
    if named:
        first: Optional[str] = named
    else:
        try:
            import pwd

            # NCCL takes the home of the password database, not $HOME.
            first = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".nccl.conf")
        except (ImportError, KeyError):
            first = None
    return [f for f in (first, SYSTEM_CONF) if f]


def read_conf(path: str) -> List[Tuple[str, str]]:
    """The NAME=VALUE lines of one NCCL configuration file, as NCCL parses them (the
    name up to the first `=` and the value after it, neither stripped; a line starting
    with `#` skipped); [] where the file cannot be read."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(MAX_CONF_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    found = []
    for line in text.split("\n"):
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        found.append((name, value))
    return found


def collect(environ: Mapping[str, str], files: Optional[Sequence[str]] = None,
            limit: Optional[int] = MAX_SETTINGS) -> List[Dict[str, Any]]:
    """Every setting of the families, from the environment (`source` "inventory" for
    the names the controller listed in FLEET_INVENTORY_ENV, else "environment") and
    from NCCL's files ("nccl.conf:PATH"), in the order NCCL applies them; `applies` is
    false where an earlier source set the same name. A name the controller cannot store
    is left out (the module docstring says why); the first `limit` (None: all)."""
    listed = {n.strip() for n in environ.get(INVENTORY_NAMES, "").split(",") if n.strip()}
    found: List[Dict[str, Any]] = []
    seen = set()
    for name in sorted(environ):
        if family_of(name) is None or not storable(name):
            continue
        seen.add(name)
        found.append(_entry(name, environ[name], INVENTORY if name in listed else ENVIRONMENT,
                            True))
    for path in conf_files(environ) if files is None else files:
        for name, value in read_conf(path):
            if family_of(name) is None or not storable(name):
                continue
            found.append(_entry(name, value, NCCL_CONF + path, name not in seen))
            seen.add(name)
    return found if limit is None else found[:limit]


def suspects(settings: Iterable[Mapping[str, Any]], figure: str) -> List[Mapping[str, Any]]:
    """The settings that applied and can move a figure of kind `figure`, less those
    fleet keeps as found."""
    return [s for s in settings if s.get("applies") and moves(str(s["name"]), figure)
            and not kept(str(s["name"]))]


def user_conf(environ: Mapping[str, str]) -> Optional[str]:
    """The file NCCL reads before /etc/nccl.conf: NCCL_CONF_FILE's, else ~/.nccl.conf."""
    first = conf_files(environ)[0]
    return None if first == SYSTEM_CONF else first


def filtered_conf(path: Optional[str], removed: Iterable[str]) -> Tuple[bytes, bool]:
    """The file at `path` as NCCL reads it, less the lines that set a name in `removed`
    (never one fleet keeps as found), and whether any line went; (b"", False) where it
    cannot be read. Every other line stays as written, past any cap on what is recorded:
    a NCCL_NVLS_ENABLE=0 there still reaches the rerun's ranks."""
    if not path:
        return b"", False
    try:
        with open(path, "rb") as fh:
            text = fh.read()
    except OSError:
        return b"", False
    drop = {n for n in removed if not kept(n)}
    kept_lines, dropped = [], False
    for line in text.split(b"\n"):
        name, equals, _ = line.partition(b"=")
        if (equals and not line.startswith(b"#")
                and name.decode("utf-8", "replace") in drop):
            dropped = True
            continue
        kept_lines.append(line)
    return b"\n".join(kept_lines), dropped


def without(environ: Mapping[str, str], removed: Iterable[str],
            conf_copy: Optional[str] = None) -> Dict[str, str]:
    """The environment of a process that runs without the settings named in `removed`:
    those taken out of the environment, and, where `conf_copy` is given (the user's NCCL
    file less the removed names' lines, `filtered_conf`), NCCL pointed at it. What fleet
    keeps as found is never taken out, whatever `removed` says. A setting of
    /etc/nccl.conf cannot be taken away (NCCL always reads it): the caller says so."""
    drop = {n for n in removed if not kept(n)}
    env = {k: v for k, v in environ.items() if k not in drop}
    if conf_copy is not None:
        env["NCCL_CONF_FILE"] = conf_copy
    return env


def removable(setting: Mapping[str, Any]) -> bool:
    """Whether a rerun can take the setting away: not one of /etc/nccl.conf."""
    return setting.get("source") != NCCL_CONF + SYSTEM_CONF
