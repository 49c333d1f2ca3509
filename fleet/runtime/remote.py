"""The host's half of the runtime: sent as text and run with the host's python3 (3.8+).

    python3 -c "$(this file)" COMMAND JSON-ARGUMENTS

Commands: inspect (driver, Python, platform, disk, which environments are whole), install
(build one environment under a lock, with the uv binary the controller uploaded where it
runs here, else with the venv module and pip), wheel-status / wheel-seal (resumable uploads
of wheels and of uv, checked by sha256), show and remove (what fleet keeps on the host).
Each answers with lines `fleet-runtime: {json}` on stdout; anything else there (a chatty
login) is ignored.

Standard library only, and nothing newer than Python 3.8: this runs before fleet knows
what the host has. An environment is built in `.build-NAME-PID` beside its final place and
renamed there only once torch imports, with a marker inside, so a half-built one is never
used; every install holds an exclusive flock on `runtime/.lock`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Any

MARK = "fleet-runtime: "
MARKER_FILE = ".fleet-runtime.json"
LOCK_FILE = ".lock"
LOG_TAIL = 40
UV_CACHE = ".uv-cache"
CONNECTION_WORDS = ("Failed to establish a new connection", "Connection refused",
                    "Name or service not known", "Temporary failure in name resolution",
                    "Network is unreachable", "No route to host", "timed out",
                    "ConnectTimeoutError", "ProxyError", "SSLError", "HTTP error 40",
                    "HTTP error 50", "403 Client Error", "404 Client Error",
                    "Could not fetch URL",
                    # uv's causes (0.13.9): "Failed to fetch: URL", then "error sending
                    # request for url", "tcp connect error" / "dns error".
                    "error sending request for url", "tcp connect error", "dns error")
MISSING_WORDS = ("No matching distribution found for", "Could not find a version that",
                 # uv: "Because torch was not found in the provided package locations"
                 # (a wheelhouse), "... in the package registry" (an index), or no wheel
                 # for this Python or machine: all end in "No solution found".
                 "No solution found when resolving dependencies")
# uv answers `--version` in milliseconds; a binary that hangs is as unusable as one that
# cannot start.
UV_CHECK_TIMEOUT_S = 60


def emit(event: dict[str, Any]) -> None:
    """Write one `fleet-runtime:` line of `event` to stdout, at once."""
    sys.stdout.write(MARK + json.dumps(event, sort_keys=True) + "\n")
    sys.stdout.flush()


def runtime_root(cache_dir: str) -> str:
    """The runtime directory under `cache_dir`."""
    return os.path.join(os.path.expanduser(cache_dir), "runtime")


def site_packages(env: str) -> str:
    """The site-packages directory of the environment `env`, for this Python's version."""
    return os.path.join(env, "lib", "python{}.{}".format(*sys.version_info[:2]), "site-packages")


def read_marker(env: str) -> dict[str, Any] | None:
    """The completion marker of the environment `env`, or None when it has none readable."""
    try:
        with open(os.path.join(env, MARKER_FILE)) as fh:
            marker = json.load(fh)
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def installer_of(env: str) -> str | None:
    """"uv 0.13.9" or "pip 23.0.1": what built the environment (environments built before
    fleet recorded it were built with pip)."""
    marker = read_marker(env)
    if marker is None:
        return None
    return str(marker.get("installer") or "pip")


def env_problem(env: str) -> str | None:
    """Why the environment at `env` cannot be used, or None when it is whole."""
    if read_marker(env) is None:
        return "no completion marker (a build that never finished)"
    # exists() follows the link: a venv whose base interpreter was removed is broken.
    if not os.path.exists(os.path.join(env, "bin", "python")):
        return "its python is gone (was the host's Python upgraded or removed?)"
    if not os.path.isfile(os.path.join(site_packages(env), "torch", "__init__.py")):
        return "torch is missing from it"
    return None


def free_bytes(path: str) -> int:
    """Bytes free to this user on the filesystem of `path` (or its nearest existing parent)."""
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def tree_bytes(path: str) -> int:
    """The size in bytes of the file or directory tree at `path`, links not followed."""
    if os.path.isfile(path) or os.path.islink(path):
        return os.lstat(path).st_size
    total = 0
    for top, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total


def read_driver(pyz: str) -> dict[str, Any]:
    """GPU count and CUDA driver version by the agent payload `pyz`, or why it could not tell."""
    if not os.path.isfile(pyz):
        return {"payload": False}
    sys.path.insert(0, pyz)
    try:
        from agent.gpu.fingerprint import read_system
        from agent.source.nvml import NvmlUnavailable, open_nvml
    except Exception as exc:  # the payload is unreadable: say so, fleet uploads it again
        return {"payload": False, "payload_error": f"{type(exc).__name__}: {exc}"}
    try:
        nvml = open_nvml()
        try:
            system = read_system(nvml)
        finally:
            nvml.close()
    except NvmlUnavailable as exc:
        return {"payload": True, "gpu_count": 0, "cuda_driver_version": None,
                "nvml_error": str(exc)[:300]}
    except Exception as exc:
        return {"payload": True, "gpu_count": 0, "cuda_driver_version": None,
                "nvml_error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {"payload": True, "gpu_count": int(system.get("gpu_count") or 0),
            "cuda_driver_version": system.get("cuda_driver_version"), "nvml_error": None}


def has_module(name: str) -> bool:
    """Whether this Python can import the module `name`."""
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def inspect(args: dict[str, Any]) -> None:
    """Emit what the host has: driver, Python, platform, free disk, and whole environments."""
    root = runtime_root(args["cache_dir"])
    envs_dir = os.path.join(root, "envs")
    envs = {}
    if os.path.isdir(envs_dir):
        for name in sorted(os.listdir(envs_dir)):
            if not name.startswith("."):
                path = os.path.join(envs_dir, name)
                envs[name] = {"problem": env_problem(path), "installer": installer_of(path),
                              "python": os.path.join(path, "bin", "python")}
    answer = {"event": "inspect", "python": platform.python_version(),
              "implementation": platform.python_implementation(),
              "machine": platform.machine(), "executable": sys.executable,
              # Which uv binary can run here: the controller uploads its own only to a
              # host of its platform (Linux, this machine, this C library).
              "system": platform.system(), "libc": list(platform.libc_ver()),
              "venv": has_module("venv"), "ensurepip": has_module("ensurepip"),
              "free_bytes": free_bytes(root), "root": root, "envs": envs}
    answer.update(read_driver(os.path.expanduser(args["pyz"])))
    emit(answer)


class Lock:
    """The exclusive flock on `runtime/.lock` that every install holds."""

    def __init__(self, root: str) -> None:
        os.makedirs(root, exist_ok=True)
        self.fd = os.open(os.path.join(root, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)

    def take(self, wait_s: float) -> bool:
        """Take the lock, waiting up to `wait_s` seconds; False when another holds it still."""
        deadline = time.monotonic() + wait_s
        said = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                return False
            if not said:
                emit({"event": "stage", "stage": "lock",
                      "message": "waiting for another fleet install on this host"})
                said = True
            time.sleep(0.25)


def hold(args: dict[str, Any]) -> None:
    """Hold the install lock until killed: while the controller uploads wheels, which no
    other probe may append to at the same time. A heartbeat line each second ends it
    when the controller is gone (the write fails), and it never outlives `hold_s`."""
    lock = Lock(runtime_root(args["cache_dir"]))
    if not lock.take(float(args["lock_wait_s"])):
        emit({"event": "failed", "kind": "lock", "detail": "another fleet install held the "
              "host's lock too long", "tail": []})
        return
    emit({"event": "held"})
    deadline = time.monotonic() + float(args["hold_s"])
    while time.monotonic() < deadline:
        time.sleep(1.0)
        emit({"event": "heartbeat"})


def classify(lines: list[str]) -> str:
    """The kind of an install's failure from its output: disk, index, missing or install."""
    text = "\n".join(lines)
    if "No space left on device" in text or "Disk quota exceeded" in text:
        return "disk"
    # pip ends an unreachable index with "No matching distribution": the connection
    # errors before it are the cause.
    if any(word in text for word in CONNECTION_WORDS):
        return "index"
    if any(word in text for word in MISSING_WORDS):
        return "missing"
    return "install"


def uv_problem(uv: str, version: str) -> str | None:
    """Why the uploaded uv binary cannot install here (a C library too old, a `noexec`
    cache_dir, a damaged file), or None when it answers with the version fleet sent."""
    try:
        done = subprocess.run([uv, "--version"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=UV_CHECK_TIMEOUT_S)
    except OSError as exc:
        return f"it does not start: {exc.strerror or exc}"
    except subprocess.TimeoutExpired:
        return f"`uv --version` did not answer in {UV_CHECK_TIMEOUT_S} s"
    said = done.stdout.decode("utf-8", "replace").strip()
    if done.returncode != 0:
        return f"`uv --version` exited with status {done.returncode}: {said[-200:]}"
    if version not in said.split():
        return f"it says {said[:100]!r}, not uv {version}"
    return None


def run_logged(command: list[str], env: dict[str, str], stage: str) -> list[str]:
    """Run `command`, relaying its output; raise Failed with its tail when it fails."""
    tail: list[str] = []
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=env)
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.decode("utf-8", "replace").rstrip()
        if not line.strip():
            continue
        tail = ([*tail, line])[-LOG_TAIL:]
        emit({"event": "log", "stage": stage, "line": line[:300]})
    status = process.wait()
    if status != 0:
        raise Failed(classify(tail), f"{command[0]} exited with status {status}", tail)
    return tail


class Failed(Exception):
    """An install step that failed: its kind, what happened, and the output's last lines."""

    def __init__(self, kind: str, detail: str, tail: list[str] | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.tail = tail or []


def drop_secret(source: dict[str, Any]) -> None:
    """Delete the file holding the index URL, if any: the secret is read once."""
    if source.get("index_url_file"):
        with contextlib.suppress(OSError):
            os.unlink(os.path.expanduser(source["index_url_file"]))


def index_urls(source: dict[str, Any]) -> list[str]:
    """The package index URLs of `source`, the secret one read (and its file deleted) first."""
    urls = []
    secret = source.get("index_url_file")
    if secret:
        try:
            with open(os.path.expanduser(secret)) as fh:
                urls.append(fh.read().strip())
        finally:
            drop_secret(source)
    elif source.get("index_url"):
        urls.append(source["index_url"])
    return urls + list(source.get("extra_index_urls") or [])


def pip_command(env: str, args: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """pip's command line, and the index URLs as its environment: on a command line any
    user of the host could read a password in them (`ps`)."""
    source = args["source"]
    # --no-compile, as uv installs: compiling every module of torch to bytecode took more
    # than half the install (torch's CPU wheel on 2 cores: 42 s with it, 20 s without);
    # Python compiles what it imports, once.
    command = [os.path.join(env, "bin", "python"), "-m", "pip", "install", "--no-input",
               "--disable-pip-version-check", "--no-cache-dir", "--progress-bar", "off",
               "--no-compile", "--only-binary", ":all:", "--retries", "2", "--timeout", "30"]
    indexes = {}
    if source["kind"] == "wheelhouse":
        command += ["--no-index", "--find-links", os.path.expanduser(source["dir"])]
    else:
        # pip takes the best version across all of them; `==2.13.0` matches the build's
        # 2.13.0+cu128 on PyTorch's index, which sorts above PyPI's plain 2.13.0, and
        # verify() checks the build that arrived.
        urls = index_urls(source)
        indexes["PIP_INDEX_URL"] = urls[0]
        if urls[1:]:
            indexes["PIP_EXTRA_INDEX_URL"] = " ".join(urls[1:])
    return [*command, args["requirement"]], indexes


def uv_command(uv: str, env: str, args: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """uv's command line and index environment (as pip_command). Its cache lives in the
    build directory (deleted before the environment is kept): not in ~/.cache, which
    `fleet runtime remove` would miss, nor in /tmp, often a small tmpfs."""
    source = args["source"]
    command = [uv, "pip", "install", "--no-config", "--python",
               os.path.join(env, "bin", "python"), "--cache-dir", os.path.join(env, UV_CACHE),
               "--no-progress", "--only-binary", ":all:",
               # For each package, the first index that has it, and only that one: torch
               # from PyTorch's index, never a torch of the same version from PyPI.
               "--index-strategy", "first-index"]
    indexes = {"UV_HTTP_RETRIES": "2", "UV_HTTP_TIMEOUT": "30"}  # as pip's flags
    if source["kind"] == "wheelhouse":
        command += ["--no-index", "--find-links", os.path.expanduser(source["dir"])]
    else:
        # uv searches --index in order, then --default-index; pip's --index-url (the
        # build's index) first, its --extra-index-url (PyPI) after.
        urls = index_urls(source)
        indexes["UV_DEFAULT_INDEX"] = urls[-1]
        if urls[:-1]:
            indexes["UV_INDEX"] = " ".join(urls[:-1])
    return [*command, args["requirement"]], indexes


def pip_version(env: str) -> str:
    """The version of pip installed in the environment `env`, or "?"."""
    for name in os.listdir(site_packages(env)):
        if name.startswith("pip-") and name.endswith(".dist-info"):
            return name[len("pip-"):-len(".dist-info")]
    return "?"


def verify(env: str, expect: dict[str, Any]) -> dict[str, Any]:
    """Torch's version and CUDA build in the new environment; Failed when not the ones asked for."""
    code = ("import json, torch; print(json.dumps({'torch': torch.__version__, "
            "'cuda': torch.version.cuda}))")
    done = subprocess.run([os.path.join(env, "bin", "python"), "-c", code],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=600)
    out = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0 or not out:
        raise Failed("verify", "torch does not import from the new environment", out[-5:])
    found: dict[str, Any] = json.loads(out[-1])
    # An index that serves torch 2.13.0 of another build (PyPI's default, or a mirror's)
    # satisfies `torch==2.13.0`: the build is what its CUDA version says.
    version = str(found.get("torch", "")).partition("+")[0]
    if version != expect["torch"] or found.get("cuda") != expect["cuda"]:
        raise Failed("build", "the source gave torch {} built for {}, not {} for {}".format(
            found.get("torch"), "CUDA " + str(found["cuda"]) if found.get("cuda") else "CPU",
            expect["torch"], "CUDA " + expect["cuda"] if expect["cuda"] else "CPU"))
    return found


def install(args: dict[str, Any]) -> None:
    """Build the environment `args` describes under the lock, and emit each stage and the end."""
    root = runtime_root(args["cache_dir"])
    envs_dir = os.path.join(root, "envs")
    final = os.path.join(envs_dir, args["name"])
    lock = Lock(root)
    if not lock.take(float(args["lock_wait_s"])):
        drop_secret(args["source"])
        held = os.path.join(root, LOCK_FILE)
        emit({"event": "failed", "kind": "lock", "detail": f"another fleet install on this "
              f"host held {held} for {float(args['lock_wait_s']):.0f} s", "tail": []})
        return
    if os.path.isdir(final) and env_problem(final) is None:
        drop_secret(args["source"])
        emit({"event": "done", "installed": False, "installer": installer_of(final),
              "python": os.path.join(final, "bin", "python")})
        return
    os.makedirs(envs_dir, exist_ok=True)
    # Holding the lock, any build directory is a dead one: an install that was killed.
    for name in os.listdir(envs_dir):
        if name.startswith(".build-"):
            shutil.rmtree(os.path.join(envs_dir, name), ignore_errors=True)
    if os.path.lexists(final):
        emit({"event": "stage", "stage": "rebuild",
              "message": f"rebuilding {args['name']}: {env_problem(final)}"})
        shutil.rmtree(final, ignore_errors=True)
    building = os.path.join(envs_dir, f".build-{args['name']}-{os.getpid()}")
    started = time.monotonic()
    try:
        free = free_bytes(envs_dir)
        if free < int(args["need_bytes"]):
            raise Failed("disk", f"{free / 1e9:.1f} GB free under {root}, about "
                                 f"{int(args['need_bytes']) / 1e9:.1f} GB needed")
        # The inventory names the source: a provider's pip.conf, uv.toml or PIP_*/UV_*
        # variables must not change it.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PIP_", "UV_")) and k != "PYTHONPATH"}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INPUT="1", PYTHONNOUSERSITE="1",
                   UV_NO_CONFIG="1", UV_PYTHON_DOWNLOADS="never")
        uv = usable_uv(args.get("uv"))
        emit({"event": "stage", "stage": "venv", "message": "creating the environment"
              + (" with uv" if uv else " with the venv module")})
        if uv:
            # The host's own interpreter, never one uv would download.
            run_logged([uv, "venv", "--no-config", "--no-python-downloads", "--python",
                        sys.executable, building], env, "venv")
            command, indexes = uv_command(uv, building, args)
        else:
            if not has_module("venv") or not has_module("ensurepip"):
                raise Failed("venv", "{} has no {} module".format(
                    sys.executable, "venv" if not has_module("venv") else "ensurepip"))
            run_logged([sys.executable, "-m", "venv", building], env, "venv")
            command, indexes = pip_command(building, args)
        emit({"event": "stage", "stage": "install",
              "message": "installing {} with {}".format(args["requirement"],
                                                        "uv" if uv else "pip")})
        run_logged(command, dict(env, **indexes), "install")
        shutil.rmtree(os.path.join(building, UV_CACHE), ignore_errors=True)
        emit({"event": "stage", "stage": "verify", "message": "importing torch"})
        found = verify(building, args["expect"])
        installer = ("uv " + args["uv"]["version"]) if uv else "pip " + pip_version(building)
        marker = {"spec": args["spec"], "found": found, "source": args["source"]["kind"],
                  "installer": installer, "installed_at": time.time(),
                  "seconds": time.monotonic() - started}
        with open(os.path.join(building, MARKER_FILE), "w") as fh:
            json.dump(marker, fh)
        os.rename(building, final)
    except Failed as exc:
        emit({"event": "failed", "kind": exc.kind, "detail": exc.detail, "tail": exc.tail})
        return
    except OSError as exc:
        kind = "disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "install"
        emit({"event": "failed", "kind": kind, "detail": str(exc), "tail": []})
        return
    finally:
        drop_secret(args["source"])
        if os.path.isdir(building):
            shutil.rmtree(building, ignore_errors=True)
    emit({"event": "done", "installed": True, "python": os.path.join(final, "bin", "python"),
          "found": found, "installer": installer, "seconds": time.monotonic() - started})


def usable_uv(uv: dict[str, Any] | None) -> str | None:
    """The uploaded uv's path where it runs here; None (pip then) where the controller sent
    none or it cannot run, said on the way."""
    if not uv:
        return None
    path = os.path.expanduser(str(uv["path"]))
    problem = uv_problem(path, str(uv["version"]))
    if problem is None:
        return path
    emit({"event": "stage", "stage": "venv", "message": "uv {} at {} cannot install here ({}): "
          "using the venv module and pip".format(uv["version"], path, problem)})
    return None


def wheel_status(args: dict[str, Any]) -> None:
    """Emit how many bytes of each wanted upload are here (-1: whole), and the free space."""
    directory = os.path.expanduser(args["dir"])
    states = {}
    for wanted in args["files"]:
        final = os.path.join(directory, wanted["name"])
        part = os.path.join(directory, "." + wanted["name"] + ".part")
        if os.path.isfile(final) and os.path.getsize(final) == wanted["size"]:
            states[wanted["name"]] = -1  # whole, and checked when it was sealed
            continue
        have = os.path.getsize(part) if os.path.isfile(part) else 0
        if have > wanted["size"]:
            os.unlink(part)
            have = 0
        states[wanted["name"]] = have
    emit({"event": "wheel-status", "have": states, "free_bytes": free_bytes(directory)})


def wheel_seal(args: dict[str, Any]) -> None:
    """Check a finished upload's sha256 and rename it into place; a mismatch deletes it."""
    directory = os.path.expanduser(args["dir"])
    final = os.path.join(directory, args["name"])
    part = os.path.join(directory, "." + args["name"] + ".part")
    digest = hashlib.sha256()
    with open(part, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != args["sha256"]:
        os.unlink(part)
        emit({"event": "sealed", "ok": False, "sha256": digest.hexdigest()})
        return
    if args.get("executable"):
        os.chmod(part, 0o700)  # uploads are written under umask 077
    os.rename(part, final)
    emit({"event": "sealed", "ok": True})


def fleet_files(cache_dir: str) -> list[str]:
    """Everything fleet keeps in `cache_dir`: agent payloads (and their upload temporaries)
    and the runtime directory. Other files there are not fleet's and stay."""
    base = os.path.expanduser(cache_dir)
    if not os.path.isdir(base):
        return []
    found = []
    for name in sorted(os.listdir(base)):
        if ((name.startswith("agent-") and name.endswith(".pyz"))
                or (name.startswith(".agent-") and ".pyz." in name) or name == "runtime"):
            found.append(os.path.join(base, name))
    return found


def show(args: dict[str, Any]) -> None:
    """Emit every file fleet keeps on this host, its size and state, and whether an install runs."""
    root = runtime_root(args["cache_dir"])
    items = []
    for path in fleet_files(args["cache_dir"]):
        if path != root:
            items.append({"kind": "agent", "path": path, "bytes": tree_bytes(path)})
    for sub, kind in (("envs", "environment"), ("wheelhouse", "wheel"), ("bin", "uv")):
        directory = os.path.join(root, sub)
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            item = {"kind": kind, "path": path, "bytes": tree_bytes(path)}
            if kind == "environment":
                item["state"] = ("partial build" if name.startswith(".build-")
                                 else env_problem(path) or "ready")
                item["installer"] = installer_of(path)
            elif name.endswith(".part"):
                item["state"] = "partial upload"
            items.append(item)
    busy = False
    if os.path.isdir(root):
        lock = Lock(root)
        busy = not lock.take(0)
    emit({"event": "show", "cache_dir": os.path.expanduser(args["cache_dir"]),
          "items": items, "installing": busy})


def remove(args: dict[str, Any]) -> None:
    """Delete all fleet keeps on this host, unless an install holds the lock; emit what went."""
    root = runtime_root(args["cache_dir"])
    if os.path.isdir(root) and not Lock(root).take(float(args.get("lock_wait_s", 0))):
        emit({"event": "failed", "kind": "lock", "detail": "a fleet install is running on "
              "this host", "tail": []})
        return
    removed = []
    for path in fleet_files(args["cache_dir"]):
        size = tree_bytes(path)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        kind = "runtime" if path == root else "agent"
        removed.append({"kind": kind, "path": path, "bytes": size})
    base = os.path.expanduser(args["cache_dir"])
    with contextlib.suppress(OSError):
        os.rmdir(base)  # only when nothing else is left in it
    emit({"event": "removed", "items": removed})


COMMANDS = {"inspect": inspect, "install": install, "hold": hold, "wheel-status": wheel_status,
            "wheel-seal": wheel_seal, "show": show, "remove": remove}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
