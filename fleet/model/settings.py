"""The settings an agent document was measured under, and a figure measured again
without them (agent/source/settings.py, agent/rerun/): what settles whose a short
figure is (docs/reruns.md).

Each setting says where it came from: "environment" (the agent's own), "inventory" (the
controller set it from the inventory's `env:` and said so in FLEET_INVENTORY_ENV), or
"nccl.conf:PATH" (a file NCCL reads). Only the families agent/source/settings.py lists are
recorded, and a value that may be a secret is withheld with the reason, here too
(agent/source/settings.py's `withheld`, applied again to what a host sends).
"""

from __future__ import annotations

import math
import statistics
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from agent.source.settings import withheld as withheld_why

SettingName = Annotated[str, StringConstraints(max_length=128,
                                               pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
SettingValue = Annotated[str, StringConstraints(max_length=256)]
Source = Annotated[str, StringConstraints(max_length=512,
                                          pattern=r"^(environment|inventory|nccl\.conf:.+)$")]
Family = Literal["nccl", "cuda", "cublas", "cudnn", "torch", "nvshmem", "openmp"]
GBps = Annotated[float, Field(ge=0, le=1e7)]


class _Strict(BaseModel):
    # As fleet/model/document.py's Strict: a host is not trusted.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class Setting(_Strict):
    """One setting of the run, its value (None where withheld, and why) and its source;
    `applies` is false where a source NCCL reads first set the same name."""

    name: SettingName
    value: SettingValue | None
    withheld: Annotated[str, StringConstraints(max_length=128)] | None = None
    source: Source
    family: Family
    applies: bool = True

    @model_validator(mode="before")
    @classmethod
    def _withhold(cls, data: Any) -> Any:
        # The agent's rule again: a modified or older agent's word is not trusted to
        # keep a secret out of the store. Withheld, not refused: the rest of the
        # document (every other probe of the host) stands.
        if isinstance(data, dict) and isinstance(data.get("value"), str):
            why = withheld_why(str(data.get("name", "")), data["value"])
            if why is not None:
                return {**data, "value": None, "withheld": why}
        return data

    @model_validator(mode="after")
    def _value_or_why(self) -> Setting:
        if (self.value is None) == (self.withheld is None):
            raise ValueError(f"setting {self.name}: give a value or why it is withheld, "
                             "not both or neither")
        return self


class SettingsRerun(_Strict):
    """The same figure measured again in the same run with the settings that could move
    it taken out of its processes' environment (`without`), those that stayed (`kept`:
    what fleet keeps as found, a setting of /etc/nccl.conf) and the floor the agent
    judged that size's first figure by (None where it had none for that size: measured
    again because another size was short)."""

    without: list[SettingName] = Field(min_length=1, max_length=64)
    kept: list[SettingName] = Field(default_factory=list, max_length=64)
    floor_gbs: GBps | None = None
    floor_basis: Annotated[str, StringConstraints(max_length=512)] | None = None
    gbs: GBps
    min_gbs: GBps
    max_gbs: GBps
    algbw_gbs: GBps | None = None
    samples_gbs: list[GBps] = Field(min_length=1, max_length=10_000)
    transports: dict[Annotated[str, StringConstraints(max_length=16)],
                     Annotated[int, Field(ge=0, le=1_000_000)]] | None = Field(
        default=None, max_length=8)
    # The settings' names rank 0 ran under: the evidence the rerun ran without them.
    ran_with: list[SettingName] = Field(default_factory=list, max_length=64)
    wall_s: Annotated[float, Field(ge=0, le=1e6)]

    @model_validator(mode="after")
    def _ran_without(self) -> SettingsRerun:
        # NCCL_CONF_FILE taken out comes back pointing at an empty file (NCCL would
        # read ~/.nccl.conf without it).
        still = sorted(set(self.without) & set(self.ran_with) - {"NCCL_CONF_FILE"})
        if still:
            raise ValueError(f"the rerun says it ran without {', '.join(still)} and its "
                             "rank ran with it")
        median = statistics.median(self.samples_gbs)
        if not math.isclose(self.gbs, median, rel_tol=1e-3, abs_tol=1e-2):
            raise ValueError(f"rerun gbs {self.gbs:.6g} is not the median of its samples "
                             f"({median:.6g})")
        if not self.min_gbs <= self.gbs <= self.max_gbs:
            raise ValueError("rerun must hold min_gbs <= gbs <= max_gbs")
        return self
