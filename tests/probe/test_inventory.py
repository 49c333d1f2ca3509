"""inventory.yaml: validation with file:line:column, field and fix; inheritance; secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.errors import InputError
from fleet.inventory import inventory_schema, load_inventory, parse_inventory
from tests.conftest import ROOT

EXAMPLE = ROOT / "inventory" / "example.yaml"


def test_example_is_valid_and_inherits_as_documented() -> None:
    targets = {t.key: t for t in load_inventory(EXAMPLE).targets}
    gpu02 = targets["lambda/gpu-02"]
    assert gpu02.tags == ("nightly", "spare")
    assert gpu02.user == "ubuntu" and gpu02.currency == "USD"
    assert gpu02.price_per_gpu_hour == 2.99
    assert gpu02.expect is not None
    assert (gpu02.expect.variant, gpu02.expect.gpu_count, gpu02.expect.min_power_limit_w) == (
        "H100 SXM5 80GB", 4, 700)
    a100 = targets["coreweave/a100-2"]
    assert a100.user == "root" and a100.port == 2222 and a100.jump == "bastion.example.net"
    assert a100.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert targets["my-ssh-config/gpu-box"].address == "gpu-box"
    assert targets["workstation/localhost"].transport == "local"


def test_committed_schema_is_the_models() -> None:
    committed = json.loads((ROOT / "inventory" / "inventory.schema.json").read_text())
    assert committed == inventory_schema(), "regenerate: fleet inventory schema > " \
                                            "inventory/inventory.schema.json"


BAD = [
    # (inventory text, the start of the message's location, what it must say)
    ("providers:\n  a:\n    hosts:\n      h: {prot: 22}\n",
     "inv.yaml:4:11: providers.a.hosts.h.prot:", "Did you mean `port`?"),
    ("providers:\n  a:\n    hosts:\n      h:\n        port: 70000\n",
     "inv.yaml:5:15: providers.a.hosts.h.port:", "less than or equal to 65535"),
    ("providers:\n  a:\n    hosts:\n      h: {transport: sftp}\n",
     "inv.yaml:4:22: providers.a.hosts.h.transport:", "'ssh' or 'local'"),
    ("defaults:\n  currency: usd\nproviders:\n  a:\n    hosts: {h: }\n",
     "inv.yaml:2:13: defaults.currency:", "ISO 4217"),
    ("providers:\n  a:\n    hosts:\n      h: {env: {1BAD: x}}\n",
     "inv.yaml:4:17: providers.a.hosts.h.env.1BAD:", "not an environment variable name"),
    ("providers:\n  a:\n    address: 10.0.0.1\n    hosts: {h: }\n",
     "inv.yaml:3:5: providers.a.address:", "move it under `hosts:`"),
    ("providers:\n  a: {}\n", "inv.yaml:2:6: providers.a.hosts:", "give the provider's hosts"),
    ("defaults: {user: x}\n", "inv.yaml:1:1: providers:", "at least one provider"),
    ("providers:\n  a:\n    hosts:\n      h: {}\n      h: {}\n",
     "inv.yaml:5:7: providers.a.hosts.h:", "given twice (first on line 4)"),
    ("providers:\n  a:\n    hosts:\n      h:\n        address: [1, 2]\n",
     "inv.yaml:5:18: providers.a.hosts.h.address:", "valid string"),
    ("providers:\n  a:\n    hosts:\n      'bad name': {}\n",
     "inv.yaml:4:7: providers.a.hosts.bad name:", "not a usable name"),
    ("providers:\n  a:\n    hosts:\n      h: {transport: local, port: 22}\n",
     "inv.yaml:4:7: providers.a.hosts.h:", "port is an SSH setting"),
    ("providers:\n  a:\n    hosts:\n      h: {python: 'python3; rm -rf /'}\n",
     "inv.yaml:4:19: providers.a.hosts.h.python:", "without spaces or shell characters"),
    # The storage and host limits a listing promises (issue 58).
    ("providers:\n  a:\n    expect: {shared_fs: mnt/data}\n    hosts: {h: }\n",
     "inv.yaml:3:25: providers.a.expect.shared_fs.0:", "an absolute path, without spaces"),
    ("providers:\n  a:\n    expect:\n      scratch: '/scratch; rm'\n    hosts: {h: }\n",
     "inv.yaml:4:16: providers.a.expect.scratch:", "an absolute path"),
    ("providers:\n  a:\n    expect:\n      container: me\n    hosts: {h: }\n",
     "inv.yaml:4:18: providers.a.expect.container:", "'renter' or 'provider'"),
    ("providers:\n  a:\n    expect:\n      scratch_read_gbps: 0\n    hosts: {h: }\n",
     "inv.yaml:4:26: providers.a.expect.scratch_read_gbps:", "greater than 0"),
    ("providers:\n  a: {hosts: {h: }\n", "inv.yaml:3:1: not valid YAML:", ""),
    ("providers:\n\tfoo: 1\n", "inv.yaml:2:1: not valid YAML:", "indent with spaces"),
    ("", "inv.yaml: the file is empty", "inventory/example.yaml"),
    ("- a\n- b\n", "inv.yaml:1:1: the inventory must be a mapping", ""),
]


@pytest.mark.parametrize(("text", "where", "says"), BAD)
def test_errors_name_file_line_field_and_fix(text: str, where: str, says: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_inventory(text, "inv.yaml")
    message = str(caught.value)
    assert where in message
    assert says in message


@pytest.mark.parametrize("text", [
    "providers:\n  a:\n    password: hunter2\n    hosts: {h: }\n",
    "defaults:\n  ssh_passphrase: hunter2\nproviders: {a: {hosts: {h: }}}\n",
    "providers:\n  a:\n    hosts:\n      h: {env: {DB_SECRET: hunter2}}\n",
    "providers:\n  a:\n    hosts:\n      h:\n        nested: {Password: hunter2}\n",
])
def test_secrets_are_refused_without_echoing_them(text: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_inventory(text, "inv.yaml")
    message = str(caught.value)
    assert "hunter2" not in message
    assert "inv.yaml:" in message
    assert "_env" in message or "remove it" in message


def test_secrets_by_environment_variable_name_are_fine() -> None:
    _, [target] = parse_inventory(
        "providers:\n  a:\n    password_env: FLEET_PW\n    identity_file: ~/.ssh/k\n"
        "    identity_passphrase_env: FLEET_KEY_PW\n    hosts: {h: }\n", "inv.yaml")
    assert (target.password_env, target.identity_passphrase_env) == ("FLEET_PW", "FLEET_KEY_PW")
    assert target.identity_files == ("~/.ssh/k",)


def test_yaml_anchors_and_merge_keys() -> None:
    text = """\
x-common: &common {user: admin, port: 2200}
providers:
  a:
    hosts:
      h1: {<<: *common, address: 10.0.0.1}
      h2: {<<: *common, port: 2201}
"""
    # A top-level key that is not a field is refused, naming it...
    with pytest.raises(InputError, match="x-common: unknown field"):
        parse_inventory(text, "inv.yaml")
    # ...so anchors live where they are used.
    text = text.replace("x-common: &common {user: admin, port: 2200}\n", "").replace(
        "      h1: {<<: *common,",
        "      h0: &common {user: admin, port: 2200}\n      h1: {<<: *common,")
    _, targets = parse_inventory(text, "inv.yaml")
    by_name = {t.name: t for t in targets}
    assert (by_name["h1"].user, by_name["h1"].port, by_name["h1"].address) == (
        "admin", 2200, "10.0.0.1")
    assert by_name["h2"].port == 2201


def test_missing_file_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no such file.*example\.yaml"):
        load_inventory(tmp_path / "nope.yaml")
