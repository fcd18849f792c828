"""``CALL namespace.procedure(args)`` (``ringflow.cql._procedures``): parsing, binding by the
procedure's signature (literals, positional and named markers, prepared), its rows, and the
typed errors of a bad call."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ringflow.cql._parser import CqlSyntaxProblem, parse_statement
from ringflow.cql._procedures import Procedure
from ringflow.errors import ErrorCode, InvalidRequest
from ringflow.schema import parse_type
from tests.unit.cql._exec_harness import ExecNode, column_names, decode_rows, value

TEXT, BOOLEAN, INT = parse_type("text"), parse_type("boolean"), parse_type("int")
TEXTS, OPTIONS = parse_type("list<text>"), parse_type("map<text, text>")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = ExecNode(tmp_path)
    calls: list[Mapping[str, object]] = []

    def echo(arguments: Mapping[str, object]) -> list[tuple[object, ...]]:
        calls.append(dict(arguments))
        if arguments.get("keyspace") == "boom":
            raise InvalidRequest("Keyspace boom does not exist")
        tables = arguments.get("tables") or []
        assert isinstance(tables, list)
        return [(str(arguments.get("keyspace")), len(tables), arguments.get("flag"))]

    node.processor.register_procedure(
        Procedure(
            "NodeOps",
            "echo",
            (
                (("keyspace", TEXT), ("tables", TEXTS), ("flag", BOOLEAN)),
                (("keyspace", TEXT), ("tables", TEXTS), ("flag", BOOLEAN), ("extra", INT)),
            ),
            (("keyspace", TEXT), ("table_count", INT), ("flag", BOOLEAN)),
            echo,
        )
    )
    node.processor.register_procedure(
        Procedure(
            "NodeOps",
            "opts",
            ((("options", OPTIONS),),),
            (("status", TEXT),),
            lambda arguments: calls.append(dict(arguments)) or [("ok",)],
        )
    )
    node.calls = calls  # type: ignore[attr-defined]
    yield node
    node.close()


def test_call_parses_a_namespaced_procedure_and_needs_the_namespace() -> None:
    statement = parse_statement("CALL NodeOps.repair('ks', ['a', 'b'], true);")
    assert (statement.procedure.keyspace, statement.procedure.name) == ("nodeops", "repair")  # type: ignore[union-attr]
    assert len(statement.arguments) == 3  # type: ignore[union-attr]
    with pytest.raises(CqlSyntaxProblem):
        parse_statement("CALL repair('ks')")
    with pytest.raises(CqlSyntaxProblem):
        parse_statement("CALL NodeOps.repair('ks'")


def test_literal_arguments_are_typed_by_the_signature_and_rows_come_back(node: ExecNode) -> None:
    response = node.raw("CALL NodeOps.echo('shop', ['orders', 'items'], true)")
    assert column_names(response) == ["keyspace", "table_count", "flag"]
    assert decode_rows(response) == [("shop", 2, True)]
    assert node.calls == [{"keyspace": "shop", "tables": ["orders", "items"], "flag": True}]  # type: ignore[attr-defined]
    assert node.ok("call nodeops.ECHO('shop', null, false, 7)") == [("shop", 0, False)]
    node.ok("CALL NodeOps.opts({'a': 'b'})")
    assert node.calls[-1] == {"options": {"a": "b"}}  # type: ignore[attr-defined]
    node.ok("CALL NodeOps.opts(?)", value(OPTIONS, {"c": "d"}))
    assert node.calls[-1] == {"options": {"c": "d"}}  # type: ignore[attr-defined]


def test_markers_bind_positionally_by_name_and_prepared(node: ExecNode) -> None:
    values = (value(TEXT, "ks"), value(TEXTS, ["t"]), value(BOOLEAN, False))
    assert node.ok("CALL NodeOps.echo(?, ?, ?)", *values) == [("ks", 1, False)]
    named = node.ok(
        "CALL NodeOps.echo(:ks, :tbls, :flag)",
        *values,
        names=("ks", "tbls", "flag"),
    )
    assert named == [("ks", 1, False)]
    prepared = node.prepare("CALL NodeOps.echo(?, ?, ?)")
    assert [spec.name for spec in prepared.bind_metadata.columns] == ["keyspace", "tables", "flag"]
    assert [spec.type for spec in prepared.bind_metadata.columns] == [TEXT, TEXTS, BOOLEAN]
    assert prepared.result_metadata.columns is not None
    assert decode_rows(node.execute(prepared.statement_id, values)) == [("ks", 1, False)]


def test_bad_calls_are_invalid_requests(node: ExecNode) -> None:
    unknown = node.error("CALL NodeOps.nothing('ks')")
    assert (
        unknown.code == ErrorCode.INVALID and "Unknown procedure nodeops.nothing" in unknown.message
    )
    arity = node.error("CALL NodeOps.echo('ks')")
    assert arity.code == ErrorCode.INVALID and "3 or 4 required but 1 provided" in arity.message
    wrong_type = node.error("CALL NodeOps.echo(1, ['t'], true)")
    assert wrong_type.code == ErrorCode.INVALID
    refused = node.error("CALL NodeOps.echo('boom', ['t'], true)")
    assert refused.code == ErrorCode.INVALID and "boom does not exist" in refused.message
    assert node.processor.internal_errors == 0


def test_a_procedure_runs_without_the_processor_lock(node: ExecNode) -> None:
    """A long operation (a synchronous repair) must not hold up other statements: the body runs
    after the lock is released, so another thread's statement completes meanwhile."""

    entered, release = threading.Event(), threading.Event()
    answered: list[object] = []

    def slow(arguments: Mapping[str, object]) -> list[tuple[object, ...]]:
        entered.set()
        assert release.wait(10)
        return [("done",)]

    node.processor.register_procedure(
        Procedure("NodeOps", "slow", ((),), (("status", TEXT),), slow)
    )
    caller = threading.Thread(target=lambda: answered.append(node.q("CALL NodeOps.slow()")))
    caller.start()
    assert entered.wait(10)
    keyspaces = node.ok("SELECT keyspace_name FROM system_schema.keyspaces")
    assert ("system_schema",) in keyspaces
    release.set()
    caller.join(10)
    assert answered == [[("done",)]]


def test_a_call_answering_a_future_is_left_pending_and_answers_from_it(node: ExecNode) -> None:
    """A procedure of a long operation answers a future: no thread waits for it, the
    statement's answer is pending until it is done (its rows, or its error)."""
    answers: list[concurrent.futures.Future[list[tuple[str]]]] = []

    def body(_arguments: object) -> concurrent.futures.Future[list[tuple[str]]]:
        answers.append(concurrent.futures.Future())
        return answers[-1]

    node.processor.register_procedure(
        Procedure("NodeOps", "later", ((),), (("status", TEXT),), body)
    )
    placeholder = node.raw("CALL NodeOps.later()")
    pending = node.processor.take_pending()
    assert pending is not None, "the procedure is left pending"
    assert not pending[0].done()
    assert decode_rows(node.raw("SELECT keyspace_name FROM system_schema.keyspaces"))
    assert node.processor.take_pending() is None, "a plain read is not pending"
    answers[0].set_result([("done",)])
    answer = pending[0].result(5)
    assert decode_rows(answer) == [("done",)]
    assert placeholder is not answer

    node.raw("CALL NodeOps.later()")
    failing = node.processor.take_pending()
    assert failing is not None
    answers[1].set_exception(InvalidRequest("no such repair"))
    with pytest.raises(InvalidRequest, match="no such repair"):
        failing[0].result(5)


def test_a_call_answering_a_done_future_answers_at_once(node: ExecNode) -> None:
    done: concurrent.futures.Future[list[tuple[str]]] = concurrent.futures.Future()
    done.set_result([("now",)])
    node.processor.register_procedure(
        Procedure("NodeOps", "now", ((),), (("status", TEXT),), lambda _arguments: done)
    )
    assert node.q("CALL NodeOps.now()") == [("now",)]
    assert node.processor.take_pending() is None
