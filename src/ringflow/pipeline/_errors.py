"""The pipeline's exceptions: bad sink configuration, changes that break the change model, and
schema changes a channel has to stop for.

STYLE.md "Errors": each says who is at fault. A wrong option, a missing path or an unreachable
PostgreSQL server is the operator's (:class:`PipelineConfigError`, a ``ConfigurationError``); a
change row that does not fit the base table is the producer's (:class:`InvalidChange`, an
``InvalidRequest``). Both are raised on the driver before any Spark job starts wherever the
check does not need the data itself. A source table altered under a running query is nobody's
fault (:class:`SourceSchemaChanged`: the query restarts with the new schema); a destination
that cannot follow it is the operator's to change (:class:`DestinationBehind`, with the
statements to run, and :class:`SchemaConflict`).
"""

from __future__ import annotations

from ringflow.errors import ConfigurationError, InvalidRequest, RingflowError


class PipelineConfigError(ConfigurationError):
    """A sink or source was configured wrongly: unknown or missing option, bad URL, bad schema."""


class InvalidChange(InvalidRequest):
    """A change (or a Spark row meant to be one) that does not fit its base table."""


class SourceSchemaChanged(RingflowError):
    """The source table's columns are not those a running query reads with (an ``ALTER TABLE``
    since it started): nothing it reads is converted with the old columns; the query stops so
    that it restarts from its checkpoint with the new schema (``ringflow replicate`` does)."""

    marker = "SourceSchemaChanged"
    """The class name, found in the text of the Spark error that a failed query reports."""


class DestinationBehind(PipelineConfigError):
    """A destination lacks what a source change needs (a new column) and ringflow may not
    alter it: ``statements`` are what the operator runs (then the channel resumes)."""

    def __init__(self, message: str, statements: tuple[str, ...]) -> None:
        listed = "".join(f"\n  {statement};" for statement in statements)
        super().__init__(f"{message}; run:{listed}")
        self.statements = statements


class SchemaConflict(PipelineConfigError):
    """A source change a destination cannot represent (a column it holds with another type or
    kind, another primary key): the operator must change the destination."""
