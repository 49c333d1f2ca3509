"""Ways of reaching a host, behind one interface (`base.Transport`)."""

from __future__ import annotations

from fleet.inventory import Target
from fleet.transport.base import Transport
from fleet.transport.local import LocalTransport
from fleet.transport.ssh import SshOptions, SshPlan, SshTransport


def open_transport(target: Target, plan: SshPlan | None, ssh: SshOptions) -> Transport:
    """The transport for `target`: `plan` comes from `ssh.plan_ssh` for SSH hosts."""
    if target.transport == "local":
        return LocalTransport(target.key, target.python)
    assert plan is not None, "SSH hosts are planned before the fan-out"
    return SshTransport(target, plan, ssh)
