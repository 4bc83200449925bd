"""Durations as users write them in documents and on the command line (`90s`, `30m`, `12h`, `30d`, `2w`). Pure."""

from __future__ import annotations

__all__ = ["DURATION_UNITS", "duration_seconds"]

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_seconds(text: str) -> int:
    """`90s`, `30m`, `12h`, `30d`, `2w` in seconds (ValueError naming the form otherwise)."""
    number, unit = text[:-1], text[-1:]
    if unit not in DURATION_UNITS or not number.isdigit() or int(number) < 1:
        raise ValueError(f"{text!r} is not a duration: write a whole number and a unit, e.g. 30d, 12h, 90m, 2w")
    return int(number) * DURATION_UNITS[unit]
