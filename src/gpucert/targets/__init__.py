"""Where inventory, stack objects and evidence come from: simulated, kubernetes, local, replay."""

from __future__ import annotations

from gpucert.targets.base import MeasurePlan, Target, open_target

__all__ = ["MeasurePlan", "Target", "open_target"]
