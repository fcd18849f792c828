"""CQL constants written as text: timestamps, dates, times, uuids and durations, as Cassandra's
``fromString`` of each type reads them (``TimestampSerializer``, ``SimpleDateSerializer``,
``TimeSerializer``, ``Duration.from``, re-expressed). Pure; shared by string literals
(``_exec_terms``) and JSON values (``_json_input``).

Rules:

* timestamps: ``yyyy-mm-dd[( |T)HH:MM[:SS[.fff]]][Z|+HHMM|+HH:MM| UTC| GMT]``, naive = UTC, or
  milliseconds since epoch;
* dates: ``yyyy-mm-dd`` or the unsigned day number (epoch at 2^31); times: ``HH:MM[:SS[.f]]``
  or nanoseconds since midnight;
* durations: ``1h30m``-style units (``y mo w d h m s ms us µs ns``, each once, in that order) or
  ISO 8601 ``P..`` forms.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

from ringflow.schema import Duration

Value = object


_TIMEZONE = re.compile(r"([+-])(\d{2}):?(\d{2})$")
_INTEGER_TEXT = re.compile(r"-?\d+")
_ZONE_NAME = re.compile(r"\s*(UTC|GMT)$", re.IGNORECASE)


def parse_timestamp(text: str) -> int:
    """Milliseconds since epoch of a CQL timestamp string (naive means UTC)."""
    stripped = text.strip()
    if _INTEGER_TEXT.fullmatch(stripped):
        return int(stripped)
    if stripped.endswith(("Z", "z")):
        stripped = stripped[:-1] + "+00:00"
    zone = _ZONE_NAME.search(stripped)
    if zone is not None:  # '2011-02-03 UTC', '2011-02-03 04:05 GMT' (Cassandra's "z" patterns)
        stripped = stripped[: zone.start()] + "+00:00"
    stripped = _TIMEZONE.sub(lambda m: f"{m.group(1)}{m.group(2)}:{m.group(3)}", stripped)
    if len(stripped) > 10 and stripped[10] == " ":
        stripped = stripped[:10] + "T" + stripped[11:].replace(" ", "")
    moment = datetime.datetime.fromisoformat(stripped)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (moment - epoch) // datetime.timedelta(milliseconds=1)


def parse_date(text: str) -> Value:
    stripped = text.strip()
    if _INTEGER_TEXT.fullmatch(stripped):
        days = int(stripped)  # Cassandra's unsigned day number, epoch at 2^31
        if not 0 <= days <= 2**32 - 1:
            raise ValueError(f"Input date {stripped} is out of range")
        return days - 2**31
    return datetime.date.fromisoformat(stripped)


_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?")


def parse_time(text: str) -> Value:
    stripped = text.strip()
    if _INTEGER_TEXT.fullmatch(stripped):
        nanos = int(stripped)
        if not 0 <= nanos < 86_400 * 10**9:
            raise ValueError(f"Input long out of bounds: {stripped}")
        return nanos
    match = _TIME.fullmatch(stripped)
    if match is None:
        raise ValueError(f"{text!r} is not a time (HH:MM[:SS[.fffffffff]])")
    hours, minutes, seconds, fraction = match.groups()
    nanos = int((fraction or "").ljust(9, "0")) if fraction else 0
    return ((int(hours) * 60 + int(minutes)) * 60 + int(seconds or 0)) * 1_000_000_000 + nanos


def parse_uuid(text: str) -> Value:
    import uuid

    return uuid.UUID(text.strip())


STRING_CONVERTERS: dict[str, Callable[[str], Value]] = {
    "timestamp": parse_timestamp,
    "date": parse_date,
    "time": parse_time,
    "uuid": parse_uuid,
    "timeuuid": parse_uuid,
    "duration": lambda text: parse_duration(text),  # defined below
}

_UNIT_PART = re.compile(r"(\d+)(mo|ms|us|µs|ns|y|w|d|h|m|s)", re.IGNORECASE)
_UNITS = {  # symbol: (Cassandra's Duration.Builder order and name, months, days, nanoseconds)
    "y": (1, "years", 12, 0, 0),
    "mo": (2, "months", 1, 0, 0),
    "w": (3, "weeks", 0, 7, 0),
    "d": (4, "days", 0, 1, 0),
    "h": (5, "hours", 0, 0, 3_600_000_000_000),
    "m": (6, "minutes", 0, 0, 60_000_000_000),
    "s": (7, "seconds", 0, 0, 1_000_000_000),
    "ms": (8, "milliseconds", 0, 0, 1_000_000),
    "us": (9, "microseconds", 0, 0, 1_000),
    "µs": (9, "microseconds", 0, 0, 1_000),
    "ns": (10, "nanoseconds", 0, 0, 1),
}
_ISO_DURATION = re.compile(
    r"P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?"
)
_ISO_WEEKS = re.compile(r"P(\d+)W")
_ISO_ALTERNATIVE = re.compile(r"P(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})")


def parse_duration(text: str) -> Duration:
    """A CQL duration literal as Cassandra's ``Duration.from`` reads it: units
    (``1y2mo3w4d5h6m7s8ms9us10ns``, each unit once and in that order) or ISO 8601
    (``P1Y2M3DT4H5M6S``, ``P2W``, ``P0001-02-03T04:05:06``), with its error messages."""
    stripped = text.strip()
    negative = stripped.startswith("-")
    body = stripped[1:] if negative else stripped
    if body.startswith("P"):
        months, days, nanos = _iso_duration(body)
    else:
        months, days, nanos = _unit_duration(body)
    sign = -1 if negative else 1
    return Duration(sign * months, sign * days, sign * nanos)


def _iso_duration(body: str) -> tuple[int, int, int]:
    if body.endswith("W"):
        weeks = _ISO_WEEKS.fullmatch(body)
        if weeks is None:
            raise ValueError(f"Unable to convert '{body}' to a duration")
        return 0, 7 * int(weeks.group(1)), 0
    pattern = _ISO_ALTERNATIVE if "-" in body else _ISO_DURATION
    match = pattern.fullmatch(body)
    if match is None:
        raise ValueError(f"Unable to convert '{body}' to a duration")
    years, months, days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    nanos = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000_000
    return years * 12 + months, days, nanos


def _unit_duration(body: str) -> tuple[int, int, int]:
    position, months, days, nanos = 0, 0, 0, 0
    last_order, last_name = 0, ""
    for match in _UNIT_PART.finditer(body):
        if match.start() != position:
            break
        position = match.end()
        amount = int(match.group(1))
        order, name, unit_months, unit_days, unit_nanos = _UNITS[match.group(2).lower()]
        if order == last_order:
            raise ValueError(f"Invalid duration. The {name} are specified multiple times")
        if order < last_order:
            raise ValueError(f"Invalid duration. The {last_name} should be after {name}")
        last_order, last_name = order, name
        months += amount * unit_months
        days += amount * unit_days
        nanos += amount * unit_nanos
    if not body or position != len(body):
        raise ValueError(f"Unable to convert '{body}' to a duration")
    return months, days, nanos
