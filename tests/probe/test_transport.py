"""The transports' pieces that need no server: ssh_config resolution, jump specs, bounded
line reading, atomic puts, exit statuses; and the listing check."""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleet.analysis.listing.expectation import check_expectation
from fleet.errors import InputError
from fleet.events import MAX_LINE, read_events
from fleet.inventory import Expect, Target, parse_inventory
from fleet.model.document import AgentDocument
from fleet.transport.base import LineSplitter, TransportError, describe_exit, shell_path
from fleet.transport.local import LocalTransport
from fleet.transport.ssh import load_ssh_config, plan_ssh, preflight
from fleet.words import normal_label
from tests.conftest import ROOT
from tests.probe.conftest import recording


def _target(tmp_path: Path, host: str, **settings: str) -> Target:
    spec = "".join(f"\n        {key}: {value}" for key, value in settings.items()) or " {}"
    _, [target] = parse_inventory(f"providers:\n  p:\n    hosts:\n      {host}:{spec}\n",
                                  "inv.yaml")
    return target


@pytest.fixture
def ssh_config(tmp_path: Path) -> Path:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-bastion.conf").write_text(
        "Host bastion\n    HostName 198.51.100.7\n    User jumper\n    Port 2022\n"
        "Host *.gpu\n    User gpuuser\n")
    config = tmp_path / "config"
    config.write_text(f"""\
Host box
    HostName 203.0.113.5
    Port 2200
    IdentityFile ~/.ssh/box_key
    ProxyJump bastion
    HostKeyAlias box-key
    Include {tmp_path}/conf.d/*.conf
    User boxuser

Host *
    User fallback
""")
    load_ssh_config.cache_clear()
    return config


def test_ssh_config_alias_jump_and_include(ssh_config: Path, tmp_path: Path) -> None:
    plan = plan_ssh(_target(tmp_path, "box", ssh_config=str(ssh_config)))
    bastion, box = plan.hops
    # After the Include the `Host box` block goes on: User boxuser still applies to box.
    assert (box.hostname, box.port, box.user) == ("203.0.113.5", 2200, "boxuser")
    assert box.identity_files == (str(Path("~/.ssh/box_key").expanduser()),)
    assert box.known_name == "[box-key]:2200"
    assert (bastion.hostname, bastion.port, bastion.user) == ("198.51.100.7", 2022, "jumper")
    assert str(plan) == "boxuser@203.0.113.5:2200 via jumper@198.51.100.7:2022"


def test_inventory_settings_win_over_ssh_config(ssh_config: Path, tmp_path: Path) -> None:
    plan = plan_ssh(_target(tmp_path, "box", ssh_config=str(ssh_config), user="admin",
                            port="22", jump="'ops@10.0.0.1:2222,[2001:db8::1]:22'"))
    first, second, box = plan.hops
    assert (box.user, box.port, box.known_name) == ("admin", 22, "box-key")
    assert (first.user, first.hostname, first.port) == ("ops", "10.0.0.1", 2222)
    assert (second.hostname, second.port) == ("2001:db8::1", 22)


def test_a_host_without_config_is_its_own_address(tmp_path: Path) -> None:
    load_ssh_config.cache_clear()
    target = _target(tmp_path, "gpu-7", ssh_config="none")
    plan = plan_ssh(target)
    assert (plan.target.hostname, plan.target.port, plan.hops[:-1]) == ("gpu-7", 22, ())


def test_bad_jump_and_missing_config_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="jump 'root@h:99999': '99999' is not a port"):
        plan_ssh(_target(tmp_path, "h", ssh_config="none", jump="root@h:99999"))
    with pytest.raises(InputError, match="no such file"):
        plan_ssh(_target(tmp_path, "h", ssh_config=str(tmp_path / "nope")))


def test_preflight_names_missing_keys_and_variables(tmp_path: Path) -> None:
    target = _target(tmp_path, "h", identity_file=str(tmp_path / "no_key"),
                     password_env="FLEET_TEST_UNSET_VARIABLE")
    problems = preflight(target)
    assert "no_key does not exist on this machine" in problems[0]
    assert "FLEET_TEST_UNSET_VARIABLE, which is not set" in problems[1]


def test_line_splitter_bounds_a_line_without_newline() -> None:
    splitter = LineSplitter("h")
    assert splitter.feed(b'{"a": 1}\n{"b"') == ['{"a": 1}']
    assert splitter.feed(b": 2}\r\n") == ['{"b": 2}']
    with pytest.raises(TransportError, match="without a newline"):
        for _ in range(MAX_LINE // (1 << 20) + 2):
            splitter.feed(b"x" * (1 << 20))


@pytest.mark.parametrize(("status", "words"), [
    (0, "exited with status 0"), (2, "exited with status 2"),
    (137, "was killed by SIGKILL (exit status 137)"), (-15, "was killed by SIGTERM"),
    (None, "connection was lost"),
])
def test_exit_statuses_in_words(status: int | None, words: str) -> None:
    assert words in describe_exit(status)


def test_shell_path_expands_home_only_at_the_start() -> None:
    assert shell_path("~/.cache/fleet") == "\"$HOME\"/.cache/fleet"
    assert shell_path("/opt/my dir") == "'/opt/my dir'"
    assert shell_path("~/a b") == "\"$HOME\"/'a b'"


def test_local_put_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    transport = LocalTransport("p/h")
    target = tmp_path / "deep" / "dir" / "agent.pyz"
    transport.put(b"x" * 100_000, str(target), 10)
    assert target.read_bytes() == b"x" * 100_000
    assert [p.name for p in target.parent.iterdir()] == ["agent.pyz"]
    with pytest.raises(TransportError, match=r"cannot write .*cache_dir"):
        transport.put(b"x", "/proc/forbidden/agent.pyz", 10)


def test_local_kill_stops_the_whole_process_group(tmp_path: Path) -> None:
    transport = LocalTransport("p/h")
    pidfile = tmp_path / "child.pid"
    process = transport.run(f"sleep 300 & echo $! > {pidfile}; echo started; wait")
    lines = process.lines(time.monotonic() + 30, threading.Event())
    assert next(iter(lines)) == "started"
    process.kill()
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stat = Path(f"/proc/{child}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[-1].startswith("Z")
    transport.close()


# --- The listing ----------------------------------------------------------------------------

@functools.cache
def agent_document(case: str) -> AgentDocument:
    """What the real agent makes of a recorded GPU host."""
    done = subprocess.run([sys.executable, "-m", "agent", "fingerprint", "--no-torch"],
                          capture_output=True, text=True, check=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                               "FLEET_NVML_REPLAY": recording(case)})
    return read_events(done.stdout.splitlines(), case)


def test_labels_compare_without_case_spaces_or_hyphens() -> None:
    assert normal_label("H100 SXM5 80GB") == normal_label("h100-sxm5-80gb")


def test_a_power_capped_gpu_is_a_mismatch() -> None:
    verdict = check_expectation(
        Expect(variant="H100 SXM5 80GB", gpu_count=8, min_power_limit_w=700),
        agent_document("h100-sxm5-x8-baremetal"))
    assert verdict is not None
    assert verdict.problems == ("power limit 500 W on GPU 5, below the listed 700 W",)
    assert verdict.summary() == "MISMATCH: power limit 500 W on GPU 5, below the listed 700 W"


def test_every_difference_is_named() -> None:
    verdict = check_expectation(
        Expect(variant="A100 SXM4 80GB", form_factor="SXM", gpu_count=2, memory_gb=40),
        agent_document("provider-a-a100-pcie"))
    assert verdict is not None and not verdict.matches
    assert verdict.problems == (
        "listed 2 GPUs, found 1",
        "listed variant A100 SXM4 80GB, found A100-PCIe-80GB on GPU 0",
        "listed form factor SXM, found PCIe on GPU 0",
        "listed 40 GB per GPU, found 80 GB on GPU 0",
    )


def test_a_match_and_nothing_listed() -> None:
    h200 = agent_document("h200-sxm-x2-passthrough")
    verdict = check_expectation(Expect(family="h200", memory_gb=141, gpu_count=2), h200)
    assert verdict is not None and verdict.summary() == "match"
    assert check_expectation(None, h200) is None


def test_what_a_vgpu_hides_is_unchecked_not_a_mismatch() -> None:
    verdict = check_expectation(Expect(form_factor="vGPU", min_power_limit_w=100),
                                agent_document("provider-c-grid-a100d-80c"))
    assert verdict is not None and verdict.matches
    assert verdict.unchecked == ("GPU 0 power limit not visible",)
