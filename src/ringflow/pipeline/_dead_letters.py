"""Dead letters: changes a destination refused as invalid, kept in the edge cluster with the reason
until an operator replays or drops them (REPLICATION.md decision 8; DSE Advanced Replication
drops such a row after one retry, we keep it).

A dead letter is a row of ``system_replication.dead_letters`` (``ringflow.replication`` owns the
table): partition ``channel``, clustering ``failed_at`` (a timeuuid of the moment the sink gave
up on the change), the change's ``keyspace_name`` and ``table_name``, the ``reason`` (the
destination's error, at most ``MAX_REASON_CHARS``) and ``change``, the change as JSON
(:func:`change_to_json`). Rows are written and read at QUORUM, as the channels are. A sink
reaches the edge as the source's reads do: with its login and over TLS when it has them
(:data:`DEAD_LETTER_ACCESS_OPTIONS`).

The JSON is self-describing (no table schema is needed to read it back) and exact: every value
keeps its Python type and value (``bytes``, ``float`` NaN and -0.0, ``Decimal`` exponents,
timestamps, durations, sets, maps with any keys, tuples), so :func:`change_from_json` gives back
an equal :class:`Change`. Values JSON has natively (str, int, bool, null, lists) are written as
they are, so a text value stays readable; the others are one-key objects ``{"$tag": ...}``.

Replaying (:func:`replay_dead_letters`) hands each change to an ``apply`` function that returns
None when the destination took it (the dead letter is deleted) or the reason it refused it again
(the dead letter is kept, with the new reason). Dropping (:func:`drop_dead_letters`) deletes
them, all or those that failed before a time. A sink records the refusals of one flush at once
(:func:`record_dead_letters`); its flushes are bounded, so is what it records, and every reader
takes a channel's partition ``PAGE_SIZE`` rows at a time.

Recording is at least once: a Spark task that recorded a refused change and then failed (its
destination went away) is run again and records it again, under another ``failed_at``. Both
are the same change: replaying applies it twice (the sinks are idempotent), dropping drops both.
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringflow.cdc import CdcOperation
from ringflow.pipeline._changes import Change
from ringflow.pipeline._cluster_client import (
    ClusterOptions,
    DriverTls,
    driver_tls,
    forget_session,
    parse_hosts,
    shared_session,
)
from ringflow.pipeline._errors import InvalidChange, PipelineConfigError
from ringflow.replication import DEAD_LETTERS_TABLE, REPLICATION_KEYSPACE
from ringflow.schema import Duration, timeuuid_from_micros, timeuuid_to_micros

FORMAT_VERSION = 1
MAX_REASON_CHARS = 2000
PAGE_SIZE = 500  # dead letters read per query: a channel's partition is read a page at a time
_TABLE = f"{REPLICATION_KEYSPACE}.{DEAD_LETTERS_TABLE}"
_QUORUM = ConsistencyLevel.QUORUM


# --- a change as JSON --------------------------------------------------------------------------


def _encode(value: object) -> object:
    """``value`` as JSON-able data that :func:`_decode` turns back into an equal value of the
    same Python type (module docstring)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return {"$float": repr(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, datetime.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"$date": value.isoformat()}
    if isinstance(value, datetime.time):
        return {"$time": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, Duration):
        return {"$duration": [value.months, value.days, value.nanoseconds]}
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return {"$inet": str(value)}
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if isinstance(value, tuple):
        return {"$tuple": [_encode(item) for item in value]}
    if isinstance(value, frozenset | set):
        tag = "$frozenset" if isinstance(value, frozenset) else "$set"
        return {tag: _sorted_encoded(value)}
    if isinstance(value, Mapping):
        return {"$map": [[_encode(k), _encode(v)] for k, v in value.items()]}
    raise InvalidChange(f"a dead letter cannot hold a {type(value).__name__} value: {value!r}")


def _sorted_encoded(items: object) -> list[object]:
    """Set elements encoded, in the order of their JSON text (the same set, the same JSON)."""
    encoded = [_encode(item) for item in items]  # type: ignore[attr-defined]
    return sorted(encoded, key=lambda item: json.dumps(item, sort_keys=True))


_DECODERS: Mapping[str, Callable[[Any], object]] = {
    "$float": lambda v: float(str(v)),
    "$bytes": lambda v: bytes.fromhex(str(v)),
    "$uuid": lambda v: uuid.UUID(str(v)),
    "$datetime": lambda v: datetime.datetime.fromisoformat(str(v)),
    "$date": lambda v: datetime.date.fromisoformat(str(v)),
    "$time": lambda v: datetime.time.fromisoformat(str(v)),
    "$decimal": lambda v: decimal.Decimal(str(v)),
    "$duration": lambda v: Duration(int(v[0]), int(v[1]), int(v[2])),
    "$inet": lambda v: ipaddress.ip_address(str(v)),
    "$tuple": lambda v: tuple(_decode(item) for item in v),
    "$frozenset": lambda v: frozenset(_decode(item) for item in v),
    "$set": lambda v: {_decode(item) for item in v},
    "$map": lambda v: {_decode(k): _decode(item) for k, item in v},
}


def _decode(data: Any) -> object:
    if isinstance(data, list):
        return [_decode(item) for item in data]
    if isinstance(data, dict):
        if len(data) != 1:
            raise ValueError(f"a tagged value has one key, got {sorted(data)}")
        ((tag, inner),) = data.items()
        decoder = _DECODERS.get(tag)
        if decoder is None:
            raise ValueError(f"unknown value tag {tag!r}")
        return decoder(inner)
    return data


def change_to_json(change: Change) -> str:
    """The change as JSON (module docstring); :func:`change_from_json` gives it back equal."""
    document = {
        "format": FORMAT_VERSION,
        "keyspace": change.keyspace,
        "table": change.table,
        "operation": change.operation.name,
        "time": str(change.time),
        "batch_seq_no": change.batch_seq_no,
        "ttl_s": change.ttl_s,
        "stream_id": change.stream_id.hex(),
        "key": {name: _encode(value) for name, value in change.key.items()},
        "values": {name: _encode(value) for name, value in change.values.items()},
        "deleted": sorted(change.deleted),
        "deleted_elements": {
            name: _sorted_encoded(elements) for name, elements in change.deleted_elements.items()
        },
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def change_from_json(text: str) -> Change:
    """The change of :func:`change_to_json`; InvalidChange naming the problem otherwise."""
    try:
        document = json.loads(text)
        if document.get("format") != FORMAT_VERSION:
            raise ValueError(f"format {document.get('format')!r} is not {FORMAT_VERSION}")
        ttl = document.get("ttl_s")
        return Change(
            str(document["keyspace"]),
            str(document["table"]),
            CdcOperation[str(document["operation"])],
            uuid.UUID(str(document["time"])),
            {str(k): _decode(v) for k, v in document["key"].items()},
            int(document["batch_seq_no"]),
            {str(k): _decode(v) for k, v in document["values"].items()},
            frozenset(str(name) for name in document["deleted"]),
            {
                str(k): frozenset(_decode(item) for item in v)
                for k, v in document["deleted_elements"].items()
            },
            None if ttl is None else int(ttl),
            bytes.fromhex(str(document["stream_id"])),
        )
    except InvalidChange:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
        raise InvalidChange(f"dead letter change {text[:200]!r} is unreadable: {error}") from None


# --- the table --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One row of ``system_replication.dead_letters`` (module docstring)."""

    channel: str
    failed_at: uuid.UUID
    keyspace: str
    table: str
    reason: str
    change_json: str

    @property
    def failed_at_us(self) -> int:
        return timeuuid_to_micros(self.failed_at)

    @property
    def change(self) -> Change:
        return change_from_json(self.change_json)


def dead_letter_settings(options: Mapping[str, str], sink: str) -> tuple[str, str]:
    """A sink's ``dead_letters`` (the edge's ``host[,host...][:port]``, or "") and ``channel``
    options, checked: PipelineConfigError for bad hosts or dead letters without a channel."""
    dead_letters = str(options.get("dead_letters", "")).strip()
    channel = str(options.get("channel", "")).strip()
    if dead_letters:
        parse_hosts(dead_letters, f"{sink}: dead_letters")
        if not channel:
            raise PipelineConfigError(f"{sink}: dead_letters needs the channel option")
    return dead_letters, channel


_EDGE_ACCESS_KEYS = ("username", "password", "ssl_ca", "ssl_certfile", "ssl_keyfile")
DEAD_LETTER_ACCESS_OPTIONS = frozenset(f"dead_letters_{key}" for key in _EDGE_ACCESS_KEYS)
"""How a sink reaches the edge for its dead letters: the source's login and TLS files
(``dead_letters_username``/``_password``, ``dead_letters_ssl_ca``/``_ssl_certfile``/
``_ssl_keyfile``), resolved on the driver; Spark redacts option keys with ``password``."""


def dead_letter_access_options(
    username: str | None, password: str | None, tls: DriverTls | None
) -> dict[str, str]:
    """The sink options of :data:`DEAD_LETTER_ACCESS_OPTIONS` for an edge reached with this
    login (both or neither) and TLS (the source's, so dead letters go where the reads come
    from the same way)."""
    found: dict[str, str] = {}
    if username is not None and password is not None:
        found.update(dead_letters_username=username, dead_letters_password=password)
    if tls is not None:
        found.update({f"dead_letters_{k}": v for k, v in tls.as_options().items()})
    return found


def dead_letter_access(
    options: Mapping[str, str],
) -> tuple[str | None, str | None, DriverTls | None]:
    """``(username, password, tls)`` of a sink's :data:`DEAD_LETTER_ACCESS_OPTIONS` (the TLS
    files are read now: PipelineConfigError for a missing one)."""
    username = str(options.get("dead_letters_username") or "") or None
    password = options.get("dead_letters_password")
    tls = driver_tls(
        {k: str(options.get(f"dead_letters_{k}") or "") for k in _EDGE_ACCESS_KEYS[2:]}
    )
    return username, None if username is None or password is None else str(password), tls


def dead_letter_options(
    hosts: Sequence[str],
    port: int,
    username: str | None = None,
    password: str | None = None,
    tls: DriverTls | None = None,
) -> ClusterOptions:
    """The cluster options of the edge's dead-letter table (QUORUM, as the channels)."""
    return ClusterOptions(
        tuple(hosts),
        REPLICATION_KEYSPACE,
        DEAD_LETTERS_TABLE,
        port,
        "QUORUM",
        tls=tls,
        username=username,
        password=password,
    )


def _statement(query: str) -> SimpleStatement:
    return SimpleStatement(query, consistency_level=_QUORUM)


def _reason(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 3] + "..."


def new_failed_at(now_us: int | None = None, low_bits: int | None = None) -> uuid.UUID:
    """A timeuuid of ``now_us`` (default: the clock) with random low bits (two sinks failing in
    the same µs keep two dead letters)."""
    micros = time.time_ns() // 1000 if now_us is None else now_us
    low = random.getrandbits(64) if low_bits is None else low_bits
    return timeuuid_from_micros(micros, low)


def write_dead_letters(session: Any, channel: str, refused: Sequence[tuple[Change, str]]) -> int:
    """Insert one dead letter per (change, reason) through ``session``; how many."""
    query = (
        f"INSERT INTO {_TABLE} (channel, failed_at, keyspace_name, table_name, reason, change) "
        "VALUES (%s, %s, %s, %s, %s, %s)"
    )
    for change, reason in refused:
        values = [
            channel,
            new_failed_at(),
            change.keyspace,
            change.table,
            _reason(reason),
            change_to_json(change),
        ]
        session.execute(_statement(query), values)
    return len(refused)


def record_dead_letters(
    options: ClusterOptions, channel: str, refused: Sequence[tuple[Change, str]]
) -> int:
    """A sink's refusals of one flush as dead letters of ``channel`` in the edge at ``options``
    (this process's shared session, dropped after an error so the next use reconnects)."""
    if not refused:
        return 0
    try:
        return write_dead_letters(shared_session(options), channel, refused)
    except Exception:
        forget_session(options)
        raise


def _dead_letter(row: Mapping[str, Any]) -> DeadLetter:
    return DeadLetter(
        str(row["channel"]),
        row["failed_at"],
        str(row["keyspace_name"] or ""),
        str(row["table_name"] or ""),
        str(row["reason"] or ""),
        str(row["change"] or ""),
    )


def _row(row: Any) -> Mapping[str, Any]:
    return row if isinstance(row, Mapping) else row._asdict()


def _pages(session: Any, channel: str, page_size: int) -> Iterator[list[DeadLetter]]:
    """The dead letters of ``channel`` in pages of at most ``page_size``, oldest first; each page
    is read after the previous one was used, starting after its last ``failed_at``, so a
    caller may delete or keep what it was given."""
    first = f"SELECT * FROM {_TABLE} WHERE channel = %s LIMIT {page_size}"
    after = f"SELECT * FROM {_TABLE} WHERE channel = %s AND failed_at > %s LIMIT {page_size}"
    last: uuid.UUID | None = None
    while True:
        if last is None:
            rows = session.execute(_statement(first), [channel])
        else:
            rows = session.execute(_statement(after), [channel, last])
        page = [_dead_letter(_row(row)) for row in rows]
        if page:
            yield page
        if len(page) < page_size:
            return
        last = page[-1].failed_at


def list_dead_letters(
    session: Any,
    channel: str,
    *,
    before: Callable[[DeadLetter], bool] | None = None,
    page_size: int = PAGE_SIZE,
) -> Iterator[DeadLetter]:
    """The dead letters of ``channel``, oldest first, read a page at a time (``before``: only
    those it is true for)."""
    for page in _pages(session, channel, page_size):
        for letter in page:
            if before is None or before(letter):
                yield letter


def delete_dead_letter(session: Any, letter: DeadLetter) -> None:
    session.execute(
        _statement(f"DELETE FROM {_TABLE} WHERE channel = %s AND failed_at = %s"),
        [letter.channel, letter.failed_at],
    )


def _keep(session: Any, letter: DeadLetter, reason: str) -> None:
    session.execute(
        _statement(f"UPDATE {_TABLE} SET reason = %s WHERE channel = %s AND failed_at = %s"),
        [_reason(reason), letter.channel, letter.failed_at],
    )


@dataclass(slots=True)
class ReplayReport:
    """What a replay did: dead letters applied (deleted) and refused again (kept)."""

    applied: int = 0
    kept: int = 0
    reasons: list[str] | None = None


def replay_dead_letters(
    session: Any,
    channel: str,
    apply: Callable[[Change], str | None],
    *,
    reasons_kept: int = 5,
    page_size: int = PAGE_SIZE,
) -> ReplayReport:
    """Hand each dead letter's change of ``channel`` to ``apply`` (None: taken; else the
    reason it was refused): taken ones are deleted, refused ones kept with the new reason.
    A change that cannot be read back is kept with that reason."""
    report = ReplayReport(reasons=[])
    for letter in list_dead_letters(session, channel, page_size=page_size):
        try:
            reason = apply(letter.change)
        except InvalidChange as error:
            reason = f"InvalidChange: {error}"
        if reason is None:
            delete_dead_letter(session, letter)
            report.applied += 1
            continue
        _keep(session, letter, reason)
        report.kept += 1
        if report.reasons is not None and len(report.reasons) < reasons_kept:
            report.reasons.append(_reason(reason))
    return report


def drop_dead_letters(
    session: Any,
    channel: str,
    *,
    before: Callable[[DeadLetter], bool] | None = None,
    page_size: int = PAGE_SIZE,
) -> int:
    """Delete the dead letters of ``channel`` (all, or those ``before`` is true for); how
    many."""
    dropped = 0
    for letter in list_dead_letters(session, channel, before=before, page_size=page_size):
        delete_dead_letter(session, letter)
        dropped += 1
    return dropped


def failed_before(bound: str) -> Callable[[DeadLetter], bool]:
    """``--before``: a timeuuid (dead letters that failed before it, by Cassandra's timeuuid
    order) or an ISO time (naive = UTC); ValueError when it is neither."""
    text = bound.strip()
    try:
        limit = uuid.UUID(text)
    except ValueError:
        limit = None
    if limit is not None:
        if limit.version != 1:
            raise ValueError(f"{bound!r} is not a time (version 1) UUID")
        key = _timeuuid_order(limit)
        return lambda letter: _timeuuid_order(letter.failed_at) < key
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{bound!r} is neither a timeuuid nor an ISO time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    micros = (moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(
        microseconds=1
    )
    return lambda letter: letter.failed_at_us < micros


def _timeuuid_order(value: uuid.UUID) -> tuple[int, bytes]:
    """Cassandra's TimeUUIDType order: the time, then the low 8 bytes as signed bytes."""
    return value.time, bytes((b + 128) % 256 for b in value.bytes[8:])
