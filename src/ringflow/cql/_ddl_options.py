"""Keyspace and table options of schema statements: what ``WITH`` may set, checked as Cassandra
checks it. Pure.

Rules (Cassandra ``cql3/statements/schema/TableAttributes``, ``KeyspaceAttributes``,
``TableParams.validate``, ``ReplicationParams``; 4.1+ ``default_keyspace_rf``), re-expressed:

* Replication maps are completed (``default_keyspace_rf``, the ``replication_factor``
  shorthand) and checked with ``ringflow.ring.replication_strategy`` (ConfigurationError,
  0x2300, on a bad one); unknown keyspace or table options are a syntax problem with
  Cassandra's "Unknown property".
* Cassandra's storage-engine table properties (``ENGINE_PROPERTY_KINDS``) are validated by
  ``TableParams``' rules (ConfigurationError) and kept with the table; the read repair chances
  (removed in Cassandra 4), ``additional_write_policy``, ``read_repair``,
  ``paxos_grace_seconds`` and ``tombstone_gc`` are accepted and ignored, so schemas exported by
  cqlsh ``DESCRIBE`` load.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ringflow.cql._ast import OptionMap, OptionValue, Properties
from ringflow.errors import ConfigurationError, InvalidRequest, SyntaxProblem
from ringflow.ring import replication_strategy
from ringflow.schema import (
    ENGINE_PROPERTY_KINDS,
    CdcOptions,
    Keyspace,
    PropertyValue,
    TableOptions,
    engine_overrides,
    replication_map,
)

DEFAULT_KEYSPACE_RF = 1
"""Cassandra's ``default_keyspace_rf``: the factor of a keyspace created without one."""
_MIN_BLOOM_FILTER_FP_CHANCE = 6.71e-05  # Cassandra's BloomCalculations minimum
_SPECULATIVE_RETRY = re.compile(
    r"(?i)(ALWAYS|NONE|NEVER|\d+(\.\d+)?(P|PERCENTILE|MS)|"
    r"(MIN|MAX)\(\s*\d+(\.\d+)?(P|PERCENTILE|MS)\s*,\s*\d+(\.\d+)?(P|PERCENTILE|MS)\s*\))"
)
"""Cassandra 4's speculative retry forms: ``99p``, ``99PERCENTILE``, ``50ms``, ``ALWAYS``,
``NONE``, ``MIN(99p,50ms)``, ``MAX(...)``."""
_MODELLED_OPTIONS = frozenset(
    {"cdc", "default_time_to_live", "gc_grace_seconds", "comment", *ENGINE_PROPERTY_KINDS}
)
_IGNORED_OPTIONS = frozenset(
    {
        "dclocal_read_repair_chance",
        "read_repair_chance",
        "additional_write_policy",
        "read_repair",
        "paxos_grace_seconds",
        "tombstone_gc",
    }
)


def option_text(value: OptionValue) -> str:
    if isinstance(value, OptionMap):
        raise InvalidRequest(f"expected a constant, got a map {value.as_dict()}")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _int_option(name: str, value: OptionValue) -> int:
    text = option_text(value)
    try:
        number = int(text)
    except ValueError:
        raise InvalidRequest(
            f"Invalid value for property '{name}': {text!r} is not an integer"
        ) from None
    return number


def _map_option(name: str, value: OptionValue) -> dict[str, str]:
    if not isinstance(value, OptionMap):
        raise InvalidRequest(f"Invalid value for property '{name}': expected a map")
    return {key: option_text(item) for key, item in value.entries}


def table_options(properties: Properties, base: TableOptions, table_name: str = "") -> TableOptions:
    """``base`` with the options ``properties`` set; Invalid for unknown ones. The storage-engine
    properties kept are those that differ from what table ``table_name`` shows by default."""
    cdc, ttl, gc_grace, comment = (
        base.cdc,
        base.default_time_to_live_s,
        base.gc_grace_seconds,
        base.comment,
    )
    engine: dict[str, PropertyValue] = dict(base.engine)
    for item in properties.items:
        name, value = item.name, item.value
        if name == "cdc":
            cdc = CdcOptions.from_map(_map_option(name, value))
        elif name == "default_time_to_live":
            ttl = _int_option(name, value)
        elif name == "gc_grace_seconds":
            gc_grace = _int_option(name, value)
        elif name == "comment":
            comment = option_text(value)
        elif name in ENGINE_PROPERTY_KINDS:
            engine[name] = _engine_property(name, value)
        elif name == "id":  # CREATE TABLE's ID (DESCRIBE ... WITH INTERNALS): build_table's
            raise ConfigurationError("Cannot alter table id.")
        elif name not in _IGNORED_OPTIONS:
            raise SyntaxProblem(f"Unknown property '{name}'")
    check_engine_properties(engine)
    return TableOptions(cdc, ttl, gc_grace, comment, engine_overrides(table_name, engine))


def _engine_property(name: str, value: OptionValue) -> PropertyValue:
    kind = ENGINE_PROPERTY_KINDS[name]
    if kind == "map":
        return tuple(sorted(_map_option(name, value).items()))
    if kind == "int":
        return _int_option(name, value)
    text = option_text(value)
    if kind == "text":
        return text
    try:
        return float(text)
    except ValueError:
        message = f"Invalid value for property '{name}': {text!r} is not a number"
        raise InvalidRequest(message) from None


def check_engine_properties(engine: Mapping[str, PropertyValue]) -> None:
    """Cassandra's ``TableParams.validate`` rules and messages (ConfigurationException,
    0x2300) for the storage-engine properties a statement sets."""

    def number(name: str, default: float) -> float:
        value = engine.get(name, default)
        assert isinstance(value, int | float)
        return value

    fp_chance = number("bloom_filter_fp_chance", 0.01)
    if not _MIN_BLOOM_FILTER_FP_CHANCE < fp_chance <= 1.0:
        raise ConfigurationError(
            f"bloom_filter_fp_chance must be larger than {_MIN_BLOOM_FILTER_FP_CHANCE} and less "
            f"than or equal to 1.0 (got {fp_chance})"
        )
    crc = number("crc_check_chance", 1.0)
    if not 0.0 <= crc <= 1.0:
        raise ConfigurationError(
            "crc_check_chance must be larger than or equal to 0 and smaller than or equal to "
            f"1.0 (got {crc})"
        )
    low, high = int(number("min_index_interval", 128)), int(number("max_index_interval", 2048))
    if low < 1:
        raise ConfigurationError(
            f"min_index_interval must be greater than or equal to 1 (got {low})"
        )
    if high < low:
        raise ConfigurationError(
            f"max_index_interval must be greater than or equal to min_index_interval ({low}) "
            f"(got {high})"
        )
    period = int(number("memtable_flush_period_in_ms", 0))
    if period < 0:
        raise ConfigurationError(
            f"memtable_flush_period_in_ms must be greater than or equal to 0 (got {period})"
        )
    retry = engine.get("speculative_retry")
    if isinstance(retry, str) and not _SPECULATIVE_RETRY.fullmatch(retry):
        raise ConfigurationError(f"Invalid value {retry} for option 'speculative_retry'")
    compaction = dict(engine.get("compaction", ()) or ())  # type: ignore[arg-type]
    if "compaction" in engine and "class" not in compaction:
        raise ConfigurationError("Missing sub-option 'class' for the 'compaction' option.")


def keyspace_options(
    name: str, properties: Properties, datacenters: Sequence[str], base: Keyspace | None
) -> Keyspace:
    replication: Mapping[str, str] | None = None if base is None else base.replication
    durable = True if base is None else base.durable_writes
    for item in properties.items:
        if item.name == "replication":
            replication = _map_option(item.name, item.value)
        elif item.name == "durable_writes":
            durable = option_text(item.value).lower() == "true"
        else:
            raise SyntaxProblem(f"Unknown property '{item.name}'")
    if replication is None:
        raise InvalidRequest("Missing mandatory option 'replication'")
    if base is None or replication is not base.replication:
        replication = _replication_options(name, replication, datacenters, base)
    replication_strategy(dict(replication), list(datacenters))
    user_types = {} if base is None else base.user_types
    return Keyspace(name, replication_map(replication), durable, user_types)


def _replication_options(
    keyspace: str, replication: Mapping[str, str], datacenters: Sequence[str], base: Keyspace | None
) -> dict[str, str]:
    """A replication map as Cassandra 4.1+ completes and checks it: a strategy without a
    replication factor gets ``default_keyspace_rf`` (NetworkTopologyStrategy: in every known
    data center; an ALTER from SimpleStrategy keeps its factor, one from NetworkTopologyStrategy
    its data centers), the ``replication_factor`` shorthand is expanded to every known data
    center, and an option the strategy does not know (a data center the cluster does not know)
    is a ConfigurationError naming it."""
    options = dict(replication)
    strategy = options.get("class")
    if strategy is None:
        raise ConfigurationError("Missing replication strategy class")
    short = strategy.rsplit(".", 1)[-1]
    previous = {} if base is None else dict(base.replication)
    previous_class = previous.pop("class", "").rsplit(".", 1)[-1]
    if short == "SimpleStrategy":
        options.setdefault("replication_factor", str(DEFAULT_KEYSPACE_RF))
        expected: set[str] = {"replication_factor"}
    elif short == "NetworkTopologyStrategy":
        factor = options.pop("replication_factor", None)
        if factor is None and len(options) == 1:  # the class alone
            if previous_class == "NetworkTopologyStrategy":
                options.update(previous)
            else:
                factor = previous.get("replication_factor", str(DEFAULT_KEYSPACE_RF))
        if factor is not None:
            for dc in datacenters:
                options.setdefault(dc, str(factor))
        expected = set(datacenters)
    else:
        return options  # other strategies: ring.replication_strategy checks them
    for option in sorted(options):
        if option != "class" and option not in expected:
            raise ConfigurationError(
                f"Unrecognized strategy option {{{option}}} passed to {short} for keyspace "
                f"{keyspace}"
            )
    return options
