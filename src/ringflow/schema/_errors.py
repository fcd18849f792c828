"""The schema layer's error types."""

from __future__ import annotations

from ringflow.errors import InvalidRequest


class SchemaError(InvalidRequest):
    """A schema definition that breaks a rule (duplicate column, bad type, bad option)."""


class InvalidValue(InvalidRequest):
    """A value that does not fit its column's type; the message names the column and the value."""
