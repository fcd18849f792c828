"""The pipeline's exceptions: bad sink configuration and changes that break the change model.

STYLE.md "Errors": each says who is at fault. A wrong option, a missing path or an unreachable
PostgreSQL server is the operator's (:class:`PipelineConfigError`, a ``ConfigurationError``); a
change row that does not fit the base table is the producer's (:class:`InvalidChange`, an
``InvalidRequest``). Both are raised on the driver before any Spark job starts wherever the
check does not need the data itself.
"""

from __future__ import annotations

from ringflow.errors import ConfigurationError, InvalidRequest


class PipelineConfigError(ConfigurationError):
    """A sink or source was configured wrongly: unknown or missing option, bad URL, bad schema."""


class InvalidChange(InvalidRequest):
    """A change (or a Spark row meant to be one) that does not fit its base table."""
