"""Fuzz target ``cql``: CQL statements, valid and mutated at token level, against one real node.

Inputs (seeded): a statement of ``_cql_corpus.corpus()`` (a schema with every type), as it is
(15 %) or with 1-4 token edits (swap, insert, delete, duplicate, huge literals and
identifiers, deep nesting, odd numbers, unicode, broken UTF-8); sent as QUERY or PREPARE on one
persistent connection (reopened if the server closes it).

Invariants (one line each, checked after every statement; the probe every ``probe_every``):

* answer or close within the deadline
* never ServerError 0x0000
* a well-framed statement never closes the connection
* every answer decodes with the real driver
* the node process stays alive
* a health probe through the real driver works, and the node logs no unexpected exception
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from fuzz._core import FuzzInput, Stats, check
from fuzz._cql_corpus import corpus, mutate, tokenize
from fuzz._native_wire import StatementConnection, query_frame
from fuzz._nodes import SingleNode


class CqlTarget:
    name = "cql"
    probe_every = 250

    def inputs(self, seed: int) -> Iterator[FuzzInput]:
        rng = random.Random(seed)
        statements = corpus()
        vocabulary = sorted({token for s in statements for token in tokenize(s)})
        while True:
            statement = rng.choice(statements)
            mode = "prepare" if rng.random() < 0.2 else "query"
            if rng.random() < 0.15:
                yield FuzzInput(statement.encode(), f"{mode}-valid")
            else:
                yield FuzzInput(mutate(statement, rng, vocabulary), f"{mode}-mutated")

    def environment(self, workdir: Path | None) -> CqlEnvironment:
        return CqlEnvironment(SingleNode(workdir))


class CqlEnvironment:
    def __init__(self, node: SingleNode) -> None:
        self.node = node
        self.connection: StatementConnection | None = None
        self.stream = 0

    def _connection(self) -> StatementConnection:
        if self.connection is None:
            try:
                self.connection = StatementConnection(self.node.address, self.node.port)
            except OSError as error:
                self.node.check_alive()
                check(False, "the node accepts connections", f"{type(error).__name__}: {error}")
        assert self.connection is not None
        return self.connection

    def execute(self, item: FuzzInput, stats: Stats) -> None:
        self.stream = self.stream % 32000 + 1
        frame = query_frame(item.data, self.stream, prepare=item.kind.startswith("prepare"))
        connection = self._connection()
        try:
            answers, closed = connection.request(frame, self.stream)
        except BaseException:
            self._drop()
            raise
        stats.answers.update(answer.label for answer in answers)
        if closed:
            stats.closes += 1
            self._drop()
        server_errors = [a for a in answers if a.error_code == 0]
        check(not server_errors, "never ServerError 0x0000", f"{item.data[:300]!r}")
        check(
            not closed,
            "a well-framed statement never closes the connection",
            f"{item.data[:300]!r}",
        )
        self.node.check_alive()

    def _drop(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.connection = None

    def probe(self, stats: Stats) -> None:
        self.node.probe()
        self.node.restore_schema()

    def recover(self) -> None:
        self._drop()
        self.node.recover()

    def settle(self) -> None:
        pass

    def close(self) -> None:
        self._drop()
        self.node.close()
