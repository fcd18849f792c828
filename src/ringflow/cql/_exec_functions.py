"""CQL's native scalar functions: time, timeuuid, uuid and blob conversions.

Each function is a :class:`ScalarFunction` with argument types, a return type and an
implementation on Python values (the codec's forms: ``uuid.UUID``, ``int`` milliseconds or
``datetime`` for ``timestamp``, ``int`` days or ``date`` for ``date``, ``bytes`` for ``blob``).
A name may have several overloads (``toTimestamp(timeuuid)``, ``toTimestamp(date)``); with known
argument types (selectors) the matching one is chosen, otherwise the first (a bind marker is
typed by it). ``null`` in gives ``null`` out, as Cassandra's native functions do.

Reference: Cassandra ``cql3/functions/TimeFcts.java``, ``UuidFcts.java``, ``BytesConversionFcts
.java`` (names and semantics re-expressed, not copied); ``minTimeuuid``/``maxTimeuuid`` come from
``ringflow.schema``. ``token(...)`` is not here: it needs the table, see ``_exec_terms``.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ringflow.cql._exec_common import StatementContext
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    BIGINT,
    BLOB,
    DATE,
    NATIVE_TYPE_NAMES,
    TIME,
    TIMESTAMP,
    TIMEUUID,
    UUID,
    CqlType,
    NativeType,
    deserialize,
    max_timeuuid,
    min_timeuuid,
    serialize,
    timeuuid_from_micros,
    timeuuid_to_micros,
)

_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DATE = datetime.date(1970, 1, 1)
_DAY_MS = 86_400_000
_DAY_US = 86_400_000_000

Implementation = Callable[[StatementContext, Sequence[object]], object]


@dataclass(frozen=True, slots=True)
class ScalarFunction:
    name: str
    argument_types: tuple[CqlType, ...]
    return_type: CqlType
    implementation: Implementation
    deterministic: bool = True

    def call(self, context: StatementContext, arguments: Sequence[object | None]) -> object | None:
        if any(argument is None for argument in arguments):
            return None
        try:
            return self.implementation(context, arguments)
        except (ValueError, OverflowError) as error:
            raise InvalidRequest(f"function {self.name}: {error}") from None


def timestamp_ms(value: object) -> int:
    """A ``timestamp`` Python value (``datetime`` or ``int`` ms) in milliseconds."""
    if isinstance(value, datetime.datetime):
        offset = value.utcoffset()
        naive = value.replace(tzinfo=None) - offset if offset is not None else value
        return (naive - _EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, int):
        return value
    raise InvalidRequest(f"{value!r} is not a timestamp")


def date_days(value: object) -> int:
    """A ``date`` Python value (``date`` or ``int`` days since epoch) in days."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return (value - _EPOCH_DATE).days
    if isinstance(value, int):
        return value
    raise InvalidRequest(f"{value!r} is not a date")


def _timeuuid_ms(value: object) -> int:
    if not isinstance(value, uuid.UUID) or value.version != 1:
        raise InvalidRequest(f"{value!r} is not a timeuuid")
    return timeuuid_to_micros(value) // 1000


def _now(context: StatementContext, _: Sequence[object]) -> object:
    return timeuuid_from_micros(context.clock_us(), context.rng.getrandbits(64))


def _current_timestamp(context: StatementContext, _: Sequence[object]) -> object:
    return context.clock_us() // 1000


def _current_date(context: StatementContext, _: Sequence[object]) -> object:
    return context.clock_us() // _DAY_US


def _current_time(context: StatementContext, _: Sequence[object]) -> object:
    return (context.clock_us() % _DAY_US) * 1000


def _random_uuid(context: StatementContext, _: Sequence[object]) -> object:
    return uuid.UUID(int=context.rng.getrandbits(128), version=4)


def _min_timeuuid(_: StatementContext, arguments: Sequence[object]) -> object:
    return min_timeuuid(timestamp_ms(arguments[0]))


def _max_timeuuid(_: StatementContext, arguments: Sequence[object]) -> object:
    return max_timeuuid(timestamp_ms(arguments[0]))


def _timeuuid_to_timestamp(_: StatementContext, arguments: Sequence[object]) -> object:
    return _timeuuid_ms(arguments[0])


def _date_to_timestamp(_: StatementContext, arguments: Sequence[object]) -> object:
    return date_days(arguments[0]) * _DAY_MS


def _timestamp_to_ms(_: StatementContext, arguments: Sequence[object]) -> object:
    return timestamp_ms(arguments[0])


def _timeuuid_to_date(_: StatementContext, arguments: Sequence[object]) -> object:
    return _timeuuid_ms(arguments[0]) // _DAY_MS


def _timestamp_to_date(_: StatementContext, arguments: Sequence[object]) -> object:
    return timestamp_ms(arguments[0]) // _DAY_MS


def _as_blob(cql_type: CqlType) -> Implementation:
    def convert(_: StatementContext, arguments: Sequence[object]) -> object:
        return serialize(cql_type, arguments[0])

    return convert


def _from_blob(cql_type: CqlType) -> Implementation:
    def convert(_: StatementContext, arguments: Sequence[object]) -> object:
        data = arguments[0]
        if not isinstance(data, bytes):
            raise InvalidRequest(f"{data!r} is not a blob")
        return deserialize(cql_type, data)

    return convert


def _fn(
    name: str,
    arguments: tuple[CqlType, ...],
    result: CqlType,
    implementation: Implementation,
    deterministic: bool = True,
) -> ScalarFunction:
    return ScalarFunction(name, arguments, result, implementation, deterministic)


_BASE_FUNCTIONS: tuple[ScalarFunction, ...] = (
    _fn("now", (), TIMEUUID, _now, False),
    _fn("currenttimeuuid", (), TIMEUUID, _now, False),
    _fn("currenttimestamp", (), TIMESTAMP, _current_timestamp, False),
    _fn("currentdate", (), DATE, _current_date, False),
    _fn("currenttime", (), TIME, _current_time, False),
    _fn("uuid", (), UUID, _random_uuid, False),
    _fn("mintimeuuid", (TIMESTAMP,), TIMEUUID, _min_timeuuid),
    _fn("maxtimeuuid", (TIMESTAMP,), TIMEUUID, _max_timeuuid),
    _fn("totimestamp", (TIMEUUID,), TIMESTAMP, _timeuuid_to_timestamp),
    _fn("totimestamp", (DATE,), TIMESTAMP, _date_to_timestamp),
    _fn("dateof", (TIMEUUID,), TIMESTAMP, _timeuuid_to_timestamp),
    _fn("tounixtimestamp", (TIMEUUID,), BIGINT, _timeuuid_to_timestamp),
    _fn("tounixtimestamp", (TIMESTAMP,), BIGINT, _timestamp_to_ms),
    _fn("tounixtimestamp", (DATE,), BIGINT, _date_to_timestamp),
    _fn("unixtimestampof", (TIMEUUID,), BIGINT, _timeuuid_to_timestamp),
    _fn("todate", (TIMEUUID,), DATE, _timeuuid_to_date),
    _fn("todate", (TIMESTAMP,), DATE, _timestamp_to_date),
)


def _blob_functions() -> tuple[ScalarFunction, ...]:
    functions: list[ScalarFunction] = []
    for name in sorted(NATIVE_TYPE_NAMES - {"blob"}):
        native = NativeType(name)
        functions.append(_fn(f"{name}asblob", (native,), BLOB, _as_blob(native)))
        functions.append(_fn(f"blobas{name}", (BLOB,), native, _from_blob(native)))
    functions.append(
        _fn("varcharasblob", (NativeType("text"),), BLOB, _as_blob(NativeType("text")))
    )
    functions.append(
        _fn("blobasvarchar", (BLOB,), NativeType("text"), _from_blob(NativeType("text")))
    )
    return tuple(functions)


def _index(functions: Sequence[ScalarFunction]) -> Mapping[str, tuple[ScalarFunction, ...]]:
    by_name: dict[str, list[ScalarFunction]] = {}
    for function in functions:
        by_name.setdefault(function.name, []).append(function)
    return MappingProxyType({name: tuple(found) for name, found in by_name.items()})


SCALAR_FUNCTIONS: Mapping[str, tuple[ScalarFunction, ...]] = _index(
    (*_BASE_FUNCTIONS, *_blob_functions())
)
AGGREGATE_NAMES = frozenset({"count", "min", "max", "sum", "avg"})


def _compatible(declared: CqlType, actual: CqlType | None) -> bool:
    if actual is None or declared == actual:
        return True
    text_like = {NativeType("text"), NativeType("ascii")}
    return declared in text_like and actual in text_like


def function_argument_name(position: int, function: str) -> str:
    """The name a value gets as argument ``position`` of a native function (a bind marker's
    name in prepared metadata, the receiver in errors): Cassandra's
    ``FunctionResolver.makeArgSpec`` (``arg0(system.intasblob)``), so drivers show the same."""
    return f"arg{position}(system.{function.lower()})"


def resolve_function(
    name: str, keyspace: str | None, argument_types: Sequence[CqlType | None]
) -> ScalarFunction:
    """The overload of ``name`` taking ``argument_types`` (None: unknown, e.g. a bind marker)."""
    if keyspace not in (None, "system"):
        raise InvalidRequest(
            f"Unknown function {keyspace}.{name}: user functions are not supported"
        )
    overloads = SCALAR_FUNCTIONS.get(name)
    if overloads is None:
        raise InvalidRequest(f"Unknown function '{name}'")
    for function in overloads:
        if len(function.argument_types) == len(argument_types) and all(
            _compatible(declared, actual)
            for declared, actual in zip(function.argument_types, argument_types, strict=True)
        ):
            return function
    shown = ", ".join("?" if t is None else t.cql_name() for t in argument_types)
    raise InvalidRequest(f"Invalid call to function {name}({shown}): no overload takes these types")
