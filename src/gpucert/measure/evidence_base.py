"""What every evidence model shares: strict frozen models, a sample that is never coerced into a number, and a
GPU or link index as a JSON object key. Imported by evidence.py and evidence_fabric.py only."""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

__all__ = ["GpuKey", "Model", "Samples"]


def _sample(value: Any) -> float:
    """A sample that is not a number (`true`, a string, null) is kept as NaN, so that the check it belongs to
    errors on that GPU ("not numbers") rather than the sample passing as 1.0 (a bool is an int to pydantic)."""
    if type(value) is float:  # what JSON and the probes give: no ABC check for each of a fleet's million samples
        return value
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan


def _samples(value: Any) -> Any:
    """Every sample of a list, in one call (a validator per sample was half of reading a document); anything but a
    list is left for the list's own validation to refuse."""
    return [_sample(v) for v in value] if isinstance(value, list) else value


def _json_key(value: Any) -> Any:
    """A GPU index as a JSON object key: the digits of an int (read strictly, "1" is no int otherwise)."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


# the repetitions of a measurement: judged by analysis.performance.sample_problem, never coerced into a figure
Samples = Annotated[list[float], BeforeValidator(_samples)]
GpuKey = Annotated[int, BeforeValidator(_json_key)]  # an index (a GPU's, a link's) as a JSON object key


class Model(BaseModel):
    # documents read from disk are validated strictly (_validate): a reading or counter given as `true` or "5" is
    # not a number, and the document is refused naming it; a probe builds them from NVML's and NumPy's numbers
    model_config = ConfigDict(extra="forbid", frozen=True)
