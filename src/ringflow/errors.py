"""The package's exceptions: one root, subclasses saying who is at fault, each with its CQL code.

STYLE.md "Errors": a client mistake, a peer's failure, an operator's bad configuration and our own
bug are different things to the person reading the message. Each class carries the native-protocol
error code (``doc/native_protocol_v4.spec`` §9) it maps to when it crosses the wire, so the CQL
layer never guesses. An exception reaching the wire as 0x0000 (ServerError) is a bug.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Native protocol v4 error codes (``native_protocol_v4.spec`` §9)."""

    SERVER_ERROR = 0x0000
    PROTOCOL_ERROR = 0x000A
    AUTHENTICATION_ERROR = 0x0100
    UNAVAILABLE = 0x1000
    OVERLOADED = 0x1001
    IS_BOOTSTRAPPING = 0x1002
    TRUNCATE_ERROR = 0x1003
    WRITE_TIMEOUT = 0x1100
    READ_TIMEOUT = 0x1200
    READ_FAILURE = 0x1300
    FUNCTION_FAILURE = 0x1400
    WRITE_FAILURE = 0x1500
    CDC_WRITE_FAILURE = 0x1600
    SYNTAX_ERROR = 0x2000
    UNAUTHORIZED = 0x2100
    INVALID = 0x2200
    CONFIG_ERROR = 0x2300
    ALREADY_EXISTS = 0x2400
    UNPREPARED = 0x2500


class RingflowError(Exception):
    """Root of every exception ringflow raises on purpose."""

    code: ErrorCode = ErrorCode.SERVER_ERROR


class ClientError(RingflowError):
    """The caller asked for something invalid: bad argument, bad value, bad statement."""

    code = ErrorCode.INVALID


class InvalidRequest(ClientError):
    """A well-formed request that cannot be honoured (CQL 0x2200 Invalid)."""

    code = ErrorCode.INVALID


class ProtocolViolation(ClientError):
    """Bytes on the wire that do not follow the protocol (CQL 0x000A)."""

    code = ErrorCode.PROTOCOL_ERROR


class SyntaxProblem(ClientError):
    """A statement that does not parse (CQL 0x2000)."""

    code = ErrorCode.SYNTAX_ERROR


class AlreadyExists(ClientError):
    """A keyspace or table that exists already (CQL 0x2400)."""

    code = ErrorCode.ALREADY_EXISTS


class Overloaded(RingflowError):
    """The node has too much of this work in hand already: try later (CQL 0x1001)."""

    code = ErrorCode.OVERLOADED


class ConfigurationError(RingflowError):
    """The operator's configuration is wrong (bad replication map, bad node settings)."""

    code = ErrorCode.CONFIG_ERROR


class PeerError(RingflowError):
    """Another node failed us: unavailable, timed out, or answered nonsense."""

    code = ErrorCode.SERVER_ERROR


class InternalError(RingflowError):
    """An invariant of our own broke. Always a bug."""

    code = ErrorCode.SERVER_ERROR


def invariant(condition: bool, message: str) -> None:
    """Always-on check (a bare ``assert`` vanishes under ``python -O``); raises InternalError."""
    if not condition:
        raise InternalError(message)
