"""The one shape of a rerun: decide what is short and what can be taken out, measure it
again without that in a child, and put each figure on its original's `rerun`.

A suite's rerun subclasses `Rerun` with its figures and what judges them; `settle` is the
same for all: a child never reruns in turn, a node with nothing short (or nothing that
can be taken out) costs nothing, and a rerun that could not be done returns why (the
figures then stand alone, and the controller calls them unsettled).
"""

import abc
import time
from typing import Any, Callable, Dict, Optional

from agent.rerun import child
from agent.rerun.bounds import TIMEOUT_S

Plan = Dict[str, Any]


class Rerun(abc.ABC):
    """One suite's short figures measured again; `kind` names its child's measurement
    (child.py's registry) and its bounds."""

    kind = ""

    @abc.abstractmethod
    def plan(self) -> Optional[Plan]:
        """What a rerun would take out ("without") and measure; None: nothing to do."""

    @abc.abstractmethod
    def said(self, plan: Plan) -> str:
        """The progress line: what was short, and what is taken out."""

    def spec(self, plan: Plan) -> Dict[str, Any]:
        """What the child measures: the suite's own configuration, narrowed."""
        raise NotImplementedError(f"{type(self).__name__} has no child to hand a spec to")

    def release(self) -> None:  # noqa: B027  most reruns leave nothing to hand back
        """What the suite left in this process, handed back before the child needs it."""

    def again(self, plan: Plan, environ: Optional[Dict[str, str]], timeout_s: float
              ) -> child.Answer:
        """Measure it again without the plan's settings: (answer, None, wall seconds), or
        (None, why it failed, wall seconds). By default in child.py's child."""
        return child.run(self.kind, self.spec(plan), plan["without"], timeout_s, environ)

    @abc.abstractmethod
    def place(self, plan: Plan, answer: Dict[str, Any], wall: float) -> None:
        """Put each figure measured again on its original's `rerun`."""

    def settle(self, progress: Callable[[str], None],
               environ: Optional[Dict[str, str]] = None,
               timeout_s: Optional[float] = None) -> Optional[str]:
        """Measure the short figures again where `plan` says; why it could not be done,
        else None."""
        if child.in_child():
            return None
        plan = self.plan()
        if plan is None:
            return None
        progress(self.said(plan))
        self.release()
        started = time.monotonic()
        answer, failed, wall = self.again(
            plan, environ, TIMEOUT_S.get(self.kind, 0.0) if timeout_s is None else timeout_s)
        if answer is None:
            return failed
        self.place(plan, answer, wall or round(time.monotonic() - started, 3))
        return None
