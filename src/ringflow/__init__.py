"""ringflow: a Dynamo-style, CDC-native wide-column database and a change-replication pipeline."""

from ringflow.errors import (
    AlreadyExists,
    ClientError,
    ConfigurationError,
    ErrorCode,
    InternalError,
    InvalidRequest,
    PeerError,
    ProtocolViolation,
    RingflowError,
    SyntaxProblem,
    invariant,
)

__all__ = [
    "AlreadyExists",
    "ClientError",
    "ConfigurationError",
    "ErrorCode",
    "InternalError",
    "InvalidRequest",
    "PeerError",
    "ProtocolViolation",
    "RingflowError",
    "SyntaxProblem",
    "invariant",
]

__version__ = "0.1.0"
