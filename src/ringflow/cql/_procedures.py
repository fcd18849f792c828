"""``CALL namespace.procedure(args)``: node operations a CQL client can ask for.

Cassandra has no CQL statement for operations such as repair (``nodetool`` speaks JMX); the
management API for Apache Cassandra (k8ssandra) gives them to CQL clients as ``CALL
NodeOps.repair(?, ?, ?)``, each answered with rows. ringflow takes that form: a layer above this
one (the cluster service) registers its procedures with ``QueryProcessor.register_procedure``,
and this module binds and runs them. Rules:

* Names are case-insensitive unless quoted, as any CQL identifier (``NodeOps.repair`` is
  ``nodeops.repair``). An unknown procedure, or a call whose argument count matches none of the
  procedure's signatures, is InvalidRequest (0x2200), as Cassandra answers an unknown function.
* A procedure may be overloaded by arity only; each signature names and types its parameters,
  which type the arguments (literals as for a column of that type, bind markers for prepared
  statements and named values).
* A procedure runs after the processor's lock is released and answers rows typed by the
  procedure's columns, or a future of them (a long operation: no thread waits for it, the
  answer is sent once it is done); what it raises, or its future fails with (a
  ``RingflowError``), is the error the client gets.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringflow.cql._ast import BindMarker, CallStatement
from ringflow.cql._exec_common import StatementContext
from ringflow.cql._exec_terms import term_value
from ringflow.cql._results import ColumnSpec, RowsMetadata, RowsResult
from ringflow.cql._wire import UNSET
from ringflow.errors import InvalidRequest
from ringflow.schema import CqlType, deserialize, serialize

Parameters = tuple[tuple[str, CqlType], ...]
ProcedureRows = Sequence[Sequence[object]]
ProcedureBody = Callable[[Mapping[str, object]], "ProcedureRows | concurrent.futures.Future[Any]"]


@dataclass(frozen=True, slots=True)
class Procedure:
    """One callable procedure: its signatures (by arity), result columns and body. The body
    gets the arguments by parameter name (``None`` for null) and returns the rows, or a future
    of them."""

    namespace: str
    name: str
    signatures: tuple[Parameters, ...]
    columns: Parameters
    body: ProcedureBody

    def __post_init__(self) -> None:
        arities = [len(signature) for signature in self.signatures]
        if not arities or len(set(arities)) != len(arities):
            raise ValueError(f"procedure {self.key}: one signature per arity, at least one")
        if not self.columns:
            raise ValueError(f"procedure {self.key}: at least one result column")

    @property
    def key(self) -> str:
        return f"{self.namespace.lower()}.{self.name.lower()}"

    def signature(self, argument_count: int) -> Parameters:
        for signature in self.signatures:
            if len(signature) == argument_count:
                return signature
        expected = " or ".join(str(len(s)) for s in self.signatures)
        raise InvalidRequest(
            f"Invalid number of arguments in call to procedure {self.key}: "
            f"{expected} required but {argument_count} provided"
        )

    def result_specs(self) -> tuple[ColumnSpec, ...]:
        return tuple(
            ColumnSpec(self.namespace, self.name, name, cql_type) for name, cql_type in self.columns
        )


class Procedures:
    """The procedures of one processor, by ``namespace.name``."""

    def __init__(self) -> None:
        self._by_key: dict[str, Procedure] = {}

    def register(self, procedure: Procedure) -> None:
        self._by_key[procedure.key] = procedure

    def of(self, statement: CallStatement) -> Procedure:
        name = statement.procedure
        key = f"{name.keyspace}.{name.name}"
        procedure = self._by_key.get(key)
        if procedure is None:
            raise InvalidRequest(f"Unknown procedure {key}")
        return procedure

    def marker_specs(self, statement: CallStatement) -> tuple[ColumnSpec, ...]:
        """The spec of each bind marker: the parameter its argument is (a marker nested in a
        collection literal has no spec of its own and is refused)."""
        procedure = self.of(statement)
        signature = procedure.signature(len(statement.arguments))
        specs: dict[int, ColumnSpec] = {}
        for argument, (name, cql_type) in zip(statement.arguments, signature, strict=True):
            if isinstance(argument, BindMarker):
                specs[argument.index] = ColumnSpec(
                    procedure.namespace, procedure.name, name, cql_type
                )
        count = len(statement.bind_markers)
        missing = [index for index in range(count) if index not in specs]
        if missing:
            raise InvalidRequest(f"cannot infer the type of bind marker(s) {missing} of the call")
        return tuple(specs[index] for index in range(count))


def bind_call(
    procedure: Procedure, statement: CallStatement, context: StatementContext
) -> dict[str, object]:
    """The call's arguments by parameter name, typed by its signature, each in the form the
    codec decodes it to (a map a dict, whether it came as a literal or a bound value)."""
    signature = procedure.signature(len(statement.arguments))
    arguments: dict[str, object] = {}
    for term, (name, cql_type) in zip(statement.arguments, signature, strict=True):
        value = term_value(term, cql_type, name, context)
        if value is None or value is UNSET:
            arguments[name] = None
        else:
            arguments[name] = deserialize(cql_type, serialize(cql_type, value, name), name)
    return arguments


def run_call(
    procedure: Procedure, arguments: Mapping[str, object]
) -> RowsResult | concurrent.futures.Future[RowsResult]:
    """Run the body and serialize its rows by the procedure's columns (once its future is done,
    when it answers one)."""
    answer = procedure.body(arguments)
    if not isinstance(answer, concurrent.futures.Future):
        return _rows_result(procedure, answer)
    result: concurrent.futures.Future[RowsResult] = concurrent.futures.Future()

    def done(rows: concurrent.futures.Future[Any]) -> None:
        try:
            result.set_result(_rows_result(procedure, rows.result()))
        except BaseException as error:
            result.set_exception(error)

    answer.add_done_callback(done)
    return result


def _rows_result(procedure: Procedure, answer: ProcedureRows) -> RowsResult:
    rows = []
    width = len(procedure.columns)
    for row in answer:
        if len(row) != width:
            raise ValueError(f"procedure {procedure.key} answered {len(row)} of {width} columns")
        rows.append(
            tuple(
                None if value is None else serialize(cql_type, value, name)
                for value, (name, cql_type) in zip(row, procedure.columns, strict=True)
            )
        )
    return RowsResult(RowsMetadata.describing(procedure.result_specs()), tuple(rows))
