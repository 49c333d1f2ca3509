"""A short soaked matmul measured again in the same run (agent/rerun/matmul.py): quick on
the card still hot from the soak, first in a child process without the settings that can
move a matmul, then with them, so that the pair differs by the settings alone."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from fleet.model.base import Seconds, Strict
from fleet.model.settings import SettingName

Tflops = Annotated[float, Field(gt=0, le=1e6)]


class MatmulRerun(Strict):
    """The pair: `tflops` without the settings (`without`), `with_tflops` with them,
    straight after; the floor the soaked figure fell under, with what it rests on."""

    without: list[SettingName] = Field(min_length=1, max_length=64)
    protocol: Literal["quick"]
    floor_tflops: Tflops
    floor_basis: Annotated[str, StringConstraints(max_length=512)]
    tflops: Tflops
    with_tflops: Tflops
    # Another process was on the GPU around either: the pair settles nothing.
    contended: bool
    # The settings' names the child ran under: the evidence it ran without them.
    ran_with: list[SettingName] = Field(default_factory=list, max_length=64)
    wall_s: Seconds

    @model_validator(mode="after")
    def _ran_without(self) -> MatmulRerun:
        still = sorted(set(self.without) & set(self.ran_with))
        if still:
            raise ValueError(f"the matmul's rerun says it ran without {', '.join(still)} "
                             "and its process ran with it")
        return self

    @property
    def cost(self) -> float:
        """What the settings cost the quick figure: 1 - with / without."""
        return 1.0 - self.with_tflops / self.tflops
