"""Durations as users write them in documents and on the command line (`90s`, `30m`, `12h`, `30d`, `2w`). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator

__all__ = ["DURATION_UNITS", "Duration", "Said", "duration_seconds"]

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_FORM = "a whole number of 1 or more and a unit, e.g. 30d, 12h, 90m, 2w"


def duration_seconds(text: str) -> int:
    """`90s`, `30m`, `12h`, `30d`, `2w` in seconds (ValueError naming the form otherwise)."""
    number, unit = text[:-1], text[-1:]
    if unit in DURATION_UNITS and number.isdigit() and int(number) < 1:
        raise ValueError(f"{text!r} is not a duration of 1 or more: the least value is 1{unit} (or 1s); write {_FORM}")
    if unit not in DURATION_UNITS or not number.isdigit():
        raise ValueError(f"{text!r} is not a duration: write {_FORM}")
    return int(number) * DURATION_UNITS[unit]


@dataclass(frozen=True, slots=True)
class Said:
    """What a text key takes, in the user's words, where "text" would not say it (spec/messages.py reads it)."""

    words: str


def _duration(text: str) -> str:
    duration_seconds(text)
    return text


# a key that takes a duration: "30 is a number; write a duration such as 30d", never "write text"
Duration = Annotated[str, AfterValidator(_duration), Said("a duration such as 30d (a whole number and a unit)")]
