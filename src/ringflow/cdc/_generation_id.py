"""CDC generation ids and their gossip string forms.

Implements ``shared/reference/scylla-cdc.md`` §2 "Generation id" (Scylla
``gms/versioned_value.cc:make_cdc_generation_id_string``), seed 000 (v2 ids: timestamp + UUID) and
seed 001 (v1 ids: the timestamp alone):

- v1: ``"<ms since epoch>"``, e.g. ``"1600000000000"``;
- v2: ``"v2;<ms since epoch>;<uuid>"``, e.g. ``"v2;1600000000000;0b1c...-..."``.

Timestamps are milliseconds (CQL ``timestamp``), signed int64. Parsing is strict: anything else
raises :class:`InvalidGenerationId` naming the text.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from ringflow.cdc._errors import InvalidGenerationId

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_MILLISECONDS = re.compile(r"-?[0-9]{1,19}")
_V2_PREFIX = "v2"


def _check_timestamp_ms(timestamp_ms: object) -> int:
    if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
        raise InvalidGenerationId(f"generation timestamp must be an int (ms), got {timestamp_ms!r}")
    if not _INT64_MIN <= timestamp_ms <= _INT64_MAX:
        raise InvalidGenerationId(f"generation timestamp {timestamp_ms} ms is outside int64")
    return timestamp_ms


@dataclass(frozen=True, slots=True, order=True)
class GenerationIdV1:
    """A pre-4.4 generation id: just the generation's timestamp (ms)."""

    timestamp_ms: int

    def __post_init__(self) -> None:
        _check_timestamp_ms(self.timestamp_ms)

    def to_gossip(self) -> str:
        return str(self.timestamp_ms)


@dataclass(frozen=True, slots=True)
class GenerationIdV2:
    """A generation id: timestamp (ms) plus the UUID keying its internal description rows."""

    timestamp_ms: int
    uuid: uuid.UUID

    def __post_init__(self) -> None:
        _check_timestamp_ms(self.timestamp_ms)
        if not isinstance(self.uuid, uuid.UUID):
            raise InvalidGenerationId(f"generation uuid must be a uuid.UUID, got {self.uuid!r}")

    def to_gossip(self) -> str:
        return f"{_V2_PREFIX};{self.timestamp_ms};{self.uuid}"


GenerationId = GenerationIdV1 | GenerationIdV2


def parse_generation_id(text: str) -> GenerationId:
    """Parse a gossiped ``CDC_GENERATION_ID`` value (v1 or v2 form)."""
    if not isinstance(text, str):
        raise InvalidGenerationId(f"a generation id is a string, got {text!r}")
    parts = text.split(";")
    if len(parts) == 1:
        return GenerationIdV1(_parse_milliseconds(parts[0], text))
    if len(parts) == 3 and parts[0] == _V2_PREFIX:
        return GenerationIdV2(_parse_milliseconds(parts[1], text), _parse_uuid(parts[2], text))
    raise InvalidGenerationId(f"generation id {text!r} is neither '<ms>' nor 'v2;<ms>;<uuid>'")


def _parse_milliseconds(field: str, text: str) -> int:
    if not _MILLISECONDS.fullmatch(field):
        raise InvalidGenerationId(f"generation id {text!r}: {field!r} is not a timestamp in ms")
    value = int(field)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidGenerationId(f"generation id {text!r}: timestamp {value} is outside int64")
    return value


def _parse_uuid(field: str, text: str) -> uuid.UUID:
    try:
        parsed = uuid.UUID(field)
    except ValueError as error:
        raise InvalidGenerationId(f"generation id {text!r}: {field!r} is not a UUID") from error
    if str(parsed) != field.lower():
        raise InvalidGenerationId(f"generation id {text!r}: {field!r} is not a canonical UUID")
    return parsed
