"""Repair asked for through CQL: ``CALL NodeOps.repair(...)`` and ``CALL
NodeOps.repairWithOptions(...)`` (issue 17: "the same as a CQL-reachable request any node can
coordinate"). A pure core: the procedures' signatures and what their arguments mean; the node's
repair service runs them (``ringflow.cluster.service``), the node a client is connected to being
the coordinator.

Cassandra itself takes repairs over JMX (``nodetool repair``); the management API for Apache
Cassandra (k8ssandra) takes them from CQL clients with these calls, and ringflow keeps their
argument order:

* ``NodeOps.repair(keyspace text, tables list<text>, full boolean)``: repair and answer when it
  is done (synchronous).
* ``NodeOps.repair(keyspace, tables, full, async boolean, parallelism text, datacenters
  list<text>, ringRanges text, repairThreads int)``: ``async`` (null: true) answers at once
  with the repair id; ``ringRanges`` is ``"start:end"``, a subrange ``(start, end]`` (one range:
  ringflow repairs one subrange per repair); ``parallelism`` may be ``sequential``,
  ``parallel`` or ``dc_parallel`` (ringflow validates a range's replicas at once whichever it
  is), ``repairThreads`` at least 1 (one session per range at a time, whatever it is).
* ``NodeOps.repairWithOptions(keyspace text, tables list<text>, options map<text, text>)``:
  ringflow's, everything ``ringflow cluster repair`` takes: ``primary_range``, ``start_token``,
  ``end_token``, ``preview`` and ``async`` (``'true'``/``'false'``; async defaults to false).

Every call answers one row ``(repair_id, status, summary)``: status ``started`` (async),
``finished``, ``failed`` (some range could not be repaired: the summary JSON says which and
why) or ``previewed``. What ringflow does not do is refused with InvalidRequest before anything
starts: incremental repair (``full = false``), a datacenter list, several ring ranges, an
unknown option, a token outside the Murmur3 bounds, an unknown keyspace or table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ringflow.cluster._repair_plan import RepairOptions, RepairSummary
from ringflow.errors import InvalidRequest
from ringflow.schema import CqlType, parse_type

NAMESPACE: Final = "NodeOps"
REPAIR: Final = "repair"
REPAIR_WITH_OPTIONS: Final = "repairWithOptions"

_TEXT, _BOOLEAN, _INT = parse_type("text"), parse_type("boolean"), parse_type("int")
_TEXTS, _OPTIONS = parse_type("list<text>"), parse_type("map<text, text>")
_SYNC_REPAIR: Final = (("keyspace", _TEXT), ("tables", _TEXTS), ("full", _BOOLEAN))
REPAIR_SIGNATURES: Final[tuple[tuple[tuple[str, CqlType], ...], ...]] = (
    _SYNC_REPAIR,
    (
        *_SYNC_REPAIR,
        ("async", _BOOLEAN),
        ("parallelism", _TEXT),
        ("datacenters", _TEXTS),
        ("ringRanges", _TEXT),
        ("repairThreads", _INT),
    ),
)
REPAIR_WITH_OPTIONS_SIGNATURES: Final = (
    (("keyspace", _TEXT), ("tables", _TEXTS), ("options", _OPTIONS)),
)
RESULT_COLUMNS: Final = (("repair_id", _TEXT), ("status", _TEXT), ("summary", _TEXT))

PARALLELISMS: Final = frozenset({"sequential", "parallel", "dc_parallel"})
OPTION_NAMES: Final = frozenset({"primary_range", "start_token", "end_token", "preview", "async"})


@dataclass(frozen=True, slots=True)
class RepairCall:
    """A call's repair, and whether the caller waits for its end."""

    options: RepairOptions
    wait: bool


def repair_call(arguments: Mapping[str, object]) -> RepairCall:
    """``NodeOps.repair`` (either arity) as a repair (Invalid for what ringflow does not do)."""
    keyspace = _keyspace(arguments)
    if arguments.get("full") is False:
        raise InvalidRequest("incremental repair is not supported: call with full = true")
    parallelism = arguments.get("parallelism")
    if parallelism is not None and str(parallelism).lower() not in PARALLELISMS:
        raise InvalidRequest(
            f"unknown repair parallelism {parallelism!r}: one of {', '.join(sorted(PARALLELISMS))}"
        )
    if arguments.get("datacenters"):
        raise InvalidRequest("a repair limited to datacenters is not supported: pass null")
    threads = arguments.get("repairThreads")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InvalidRequest(f"repairThreads must be at least 1, not {threads}")
    start, end = _ring_range(arguments.get("ringRanges"))
    options = RepairOptions(keyspace, _tables(arguments), start_token=start, end_token=end)
    asynchronous = "async" in arguments and arguments["async"] is not False
    return RepairCall(options, wait=not asynchronous)


def repair_with_options_call(arguments: Mapping[str, object]) -> RepairCall:
    """``NodeOps.repairWithOptions`` as a repair."""
    keyspace = _keyspace(arguments)
    given = arguments.get("options") or {}
    assert isinstance(given, Mapping)
    unknown = sorted(set(given) - OPTION_NAMES)
    if unknown:
        raise InvalidRequest(
            f"unknown repair option(s) {', '.join(unknown)}: "
            f"the options are {', '.join(sorted(OPTION_NAMES))}"
        )
    options = RepairOptions(
        keyspace,
        _tables(arguments),
        primary_range=_flag(given, "primary_range"),
        start_token=_token(given, "start_token"),
        end_token=_token(given, "end_token"),
        preview=_flag(given, "preview"),
    )
    return RepairCall(options, wait=not _flag(given, "async"))


def call_answer(repair_id: str, summary: RepairSummary | None) -> tuple[str, str, str | None]:
    """The row a call answers: started (no summary yet), previewed, finished or failed."""
    if summary is None:
        return (repair_id, "started", None)
    if summary.error is not None or summary.failed_ranges:
        status = "failed"
    else:
        status = "previewed" if summary.preview else "finished"
    return (repair_id, status, summary.to_json())


def _keyspace(arguments: Mapping[str, object]) -> str:
    keyspace = arguments.get("keyspace")
    if not isinstance(keyspace, str) or not keyspace:
        raise InvalidRequest("repair: the keyspace must be given")
    return keyspace


def _tables(arguments: Mapping[str, object]) -> tuple[str, ...]:
    tables = arguments.get("tables") or []
    assert isinstance(tables, list)
    if any(not isinstance(name, str) or not name for name in tables):
        raise InvalidRequest("repair: a table name is empty")
    return tuple(dict.fromkeys(str(name) for name in tables))


def _ring_range(text: object) -> tuple[int | None, int | None]:
    if text is None or text == "":
        return None, None
    pieces = str(text).split(",")
    if len(pieces) != 1:
        raise InvalidRequest("repair: one ring range per repair ('start:end')")
    start, sep, end = pieces[0].strip().partition(":")
    try:
        if not sep:
            raise ValueError
        return int(start), int(end)
    except ValueError:
        raise InvalidRequest(f"repair: ring range {text!r} is not 'start:end'") from None


def _flag(options: Mapping[object, object], name: str) -> bool:
    text = str(options.get(name, "false")).strip().lower()
    if text not in ("true", "false"):
        raise InvalidRequest(f"repair option {name} must be 'true' or 'false', not {text!r}")
    return text == "true"


def _token(options: Mapping[object, object], name: str) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    try:
        return int(str(text))
    except ValueError:
        raise InvalidRequest(f"repair option {name} {text!r} is not a token") from None
