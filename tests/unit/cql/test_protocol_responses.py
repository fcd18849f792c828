"""Every response ringflow encodes is decoded by the Scylla Python driver into what we meant.

The driver's ``ProtocolHandler.decode_message`` is the oracle: READY, SUPPORTED (with Scylla
sharding keys, read back through ``ProtocolFeatures``), AUTHENTICATE, the auth tokens, every
RESULT kind (rows with every column type, prepared with partition key indexes, every schema
change target), every EVENT, and every ERROR code mapped to the driver's exception classes.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from ipaddress import ip_address
from typing import Any

import pytest
from cassandra import (
    AlreadyExists,
    FunctionFailure,
    InvalidRequest,
    ReadFailure,
    ReadTimeout,
    Unauthorized,
    Unavailable,
    WriteFailure,
    WriteTimeout,
    util,
)
from cassandra import WriteType as DriverWriteType
from cassandra.cqltypes import UserType as DriverUserType
from cassandra.protocol import (
    AuthChallengeMessage,
    AuthenticateMessage,
    AuthSuccessMessage,
    BadCredentials,
    CDCWriteException,
    ConfigurationException,
    ErrorMessage,
    EventMessage,
    IsBootstrappingErrorMessage,
    OverloadedErrorMessage,
    PreparedQueryNotFound,
    ProtocolException,
    ReadyMessage,
    ResultMessage,
    ServerError,
    SupportedMessage,
    SyntaxException,
    TruncateError,
)
from cassandra.protocol_features import ProtocolFeatures

from ringflow.cql import (
    AlreadyExistsResponse,
    AuthChallenge,
    Authenticate,
    AuthSuccess,
    ColumnSpec,
    Compression,
    Consistency,
    ErrorResponse,
    FunctionFailureResponse,
    Inet,
    PreparedMetadata,
    PreparedResult,
    ReadFailureResponse,
    ReadTimeoutResponse,
    Ready,
    RowsMetadata,
    RowsResult,
    SchemaChange,
    SchemaChangeEvent,
    SchemaChangeResult,
    SchemaChangeTarget,
    SchemaChangeType,
    ScyllaSharding,
    SetKeyspaceResult,
    StatusChangeEvent,
    StatusChangeType,
    Supported,
    TopologyChangeEvent,
    TopologyChangeType,
    UnavailableResponse,
    UnpreparedResponse,
    VoidResult,
    WriteFailureResponse,
    WriteTimeoutResponse,
    WriteType,
    encode_message,
)
from ringflow.errors import ErrorCode
from ringflow.schema import (
    ASCII,
    BIGINT,
    BLOB,
    BOOLEAN,
    DATE,
    DECIMAL,
    DOUBLE,
    DURATION,
    FLOAT,
    INET,
    INT,
    SMALLINT,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMEUUID,
    TINYINT,
    UUID,
    VARINT,
    CqlType,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
)

from ._protocol_oracle import driver_decode, driver_round_trip

ADDRESS = UserType("ks", "address", ("street", "zip"), (TEXT, INT))

# (type, a Python value the driver serializes and reads back equal)
TYPED_VALUES: list[tuple[CqlType, Any]] = [
    (ASCII, "abc"),
    (BIGINT, -(2**40)),
    (BLOB, b"\x00\xff"),
    (BOOLEAN, True),
    (DATE, util.Date(datetime.date(2020, 1, 2))),
    (DECIMAL, decimal.Decimal("-1.25")),
    (DOUBLE, 1.5),
    (FLOAT, 2.5),
    (INET, "2001:db8::1"),
    (INT, -7),
    (SMALLINT, 300),
    (TEXT, "héllo"),
    (TIME, util.Time(datetime.time(1, 2, 3))),
    (TIMESTAMP, datetime.datetime(2020, 1, 2, 3, 4, 5)),
    (TIMEUUID, uuid.UUID("86c03aaa-e668-11f1-95d6-02fc00000001")),
    (TINYINT, -5),
    (UUID, uuid.UUID("0ea5cad7-0367-47e1-a28d-cc5b0cfa1bdd")),
    (VARINT, 10**30),
    (DURATION, util.Duration(1, 2, 3)),
    (ListType(INT), [1, 2]),
    (SetType(TEXT), {"a", "b"}),
    (MapType(TEXT, ListType(INT, frozen=True)), {"k": [1, 2]}),
    (TupleType((INT, TEXT, SetType(UUID, frozen=True))), (1, "x", None)),
    (ADDRESS, ("main st", 12345)),
    (ListType(ADDRESS.frozen_form()), [("a", 1)]),
    (MapType(TupleType((INT, INT)), ADDRESS.frozen_form()), {(1, 2): ("b", 2)}),
]


def driver_shape(driver_type: Any) -> Any:
    """The structure of a driver cqltype, to compare with ``our_shape``."""
    name = driver_type.typename
    if issubclass(driver_type, DriverUserType):
        fields = zip(driver_type.fieldnames, driver_type.subtypes, strict=True)
        shaped = tuple((field, driver_shape(sub)) for field, sub in fields)
        return ("udt", driver_type.keyspace, name, shaped)
    if driver_type.subtypes:
        return (name, tuple(driver_shape(sub) for sub in driver_type.subtypes))
    return {"varchar": "text"}.get(name, name)


def our_shape(cql_type: CqlType) -> Any:
    if isinstance(cql_type, NativeType):
        return cql_type.name
    if isinstance(cql_type, ListType | SetType):
        return ("list" if isinstance(cql_type, ListType) else "set", (our_shape(cql_type.element),))
    if isinstance(cql_type, MapType):
        return ("map", (our_shape(cql_type.key), our_shape(cql_type.value)))
    if isinstance(cql_type, TupleType):
        return ("tuple", tuple(our_shape(element) for element in cql_type.elements))
    assert isinstance(cql_type, UserType)
    fields = zip(cql_type.field_names, cql_type.field_types, strict=True)
    return ("udt", cql_type.keyspace, cql_type.name, tuple((f, our_shape(t)) for f, t in fields))


def test_ready_supported_and_authentication_messages() -> None:
    assert isinstance(driver_round_trip(Ready()), ReadyMessage)
    authenticate = driver_round_trip(
        Authenticate("org.apache.cassandra.auth.PasswordAuthenticator")
    )
    assert isinstance(authenticate, AuthenticateMessage)
    assert authenticate.authenticator == "org.apache.cassandra.auth.PasswordAuthenticator"
    challenge = driver_round_trip(AuthChallenge(b"\x01\x02"))
    assert isinstance(challenge, AuthChallengeMessage)
    assert challenge.challenge == b"\x01\x02"
    success = driver_round_trip(AuthSuccess(b"done"))
    assert isinstance(success, AuthSuccessMessage)
    assert success.token == "done"


def test_supported_advertises_cql_lz4_v4_and_scylla_sharding() -> None:
    sharding = ScyllaSharding(shard=3, shard_count=8, ignore_msb=12, shard_aware_port=19042)
    supported = driver_round_trip(Supported.for_node(sharding=sharding))
    assert isinstance(supported, SupportedMessage)
    assert supported.cql_versions == ["3.4.5"]
    assert supported.options["COMPRESSION"] == ["lz4"]
    assert supported.options["PROTOCOL_VERSIONS"] == ["4/v4"]
    features = ProtocolFeatures.parse_from_supported(supported.options)
    assert features.shard_id == 3
    info = features.sharding_info
    assert info is not None
    assert (int(info.shards_count), int(info.sharding_ignore_msb)) == (8, 12)
    assert info.partitioner == "org.apache.cassandra.dht.Murmur3Partitioner"
    assert info.sharding_algorithm == "biased-token-round-robin"
    assert int(info.shard_aware_port) == 19042


def test_supported_without_sharding_gives_no_sharding_info() -> None:
    supported = driver_round_trip(Supported.for_node(extra={"PRODUCT_TYPE": ["ringflow"]}))
    assert ProtocolFeatures.parse_from_supported(supported.options).sharding_info is None
    assert supported.options["PRODUCT_TYPE"] == ["ringflow"]


def _rows_result(rows: tuple[tuple[bytes | None, ...], ...], paging: bytes | None) -> RowsResult:
    columns = [ColumnSpec("ks", "t", f"c{i}", t) for i, (t, _) in enumerate(TYPED_VALUES)]
    return RowsResult(RowsMetadata.describing(columns, paging), rows)


def test_rows_with_every_column_type() -> None:
    described = driver_round_trip(_rows_result((), None))
    assert [driver_shape(t) for t in described.column_types] == [
        our_shape(t) for t, _ in TYPED_VALUES
    ]
    assert described.column_names == [f"c{i}" for i in range(len(TYPED_VALUES))]
    cells = tuple(
        driver_type.serialize(value, 4)
        for driver_type, (_, value) in zip(described.column_types, TYPED_VALUES, strict=True)
    )
    nulls = tuple(None for _ in cells)
    decoded = driver_round_trip(_rows_result((cells, nulls), b"\x00page\xff"))
    assert isinstance(decoded, ResultMessage)
    assert decoded.paging_state == b"\x00page\xff"
    assert list(decoded.parsed_rows[0]) == [value for _, value in TYPED_VALUES]
    assert list(decoded.parsed_rows[1]) == [None] * len(TYPED_VALUES)


def test_rows_from_two_tables_use_per_column_specs() -> None:
    columns = [ColumnSpec("ks", "a", "x", INT), ColumnSpec("other", "b", "y", TEXT)]
    decoded = driver_round_trip(RowsResult(RowsMetadata.describing(columns), ()))
    assert [(c[0], c[1], c[2]) for c in decoded.column_metadata] == [
        ("ks", "a", "x"),
        ("other", "b", "y"),
    ]


def test_rows_without_metadata_use_the_prepared_metadata() -> None:
    prepared = driver_round_trip(
        PreparedResult(
            b"id",
            PreparedMetadata(),
            RowsMetadata.describing([ColumnSpec("ks", "t", "v", INT)]),
        )
    )
    rows = RowsResult(RowsMetadata.skipped(1), ((b"\x00\x00\x00\x2a",),))
    decoded = driver_decode(encode_message(rows, 1), result_metadata=prepared.column_metadata)
    assert decoded.parsed_rows == [(42,)]


def test_void_and_set_keyspace() -> None:
    assert driver_round_trip(VoidResult()).kind == 0x0001
    assert driver_round_trip(SetKeyspaceResult("ks1")).new_keyspace == "ks1"


def test_prepared_carries_partition_key_indexes_for_token_aware_routing() -> None:
    bind = PreparedMetadata(
        columns=(
            ColumnSpec("ks", "t", "c", TEXT),
            ColumnSpec("ks", "t", "k2", INT),
            ColumnSpec("ks", "t", "k1", UUID),
        ),
        partition_key_indexes=(2, 1),
    )
    result = RowsMetadata.describing([ColumnSpec("ks", "t", "v", MapType(TEXT, INT))])
    decoded = driver_round_trip(PreparedResult(b"\x01\x02\x03\x04", bind, result))
    assert decoded.query_id == b"\x01\x02\x03\x04"
    assert decoded.pk_indexes == [2, 1]
    assert [(m.keyspace_name, m.table_name, m.name) for m in decoded.bind_metadata] == [
        ("ks", "t", "c"),
        ("ks", "t", "k2"),
        ("ks", "t", "k1"),
    ]
    assert [driver_shape(m.type) for m in decoded.bind_metadata] == ["text", "int", "uuid"]
    assert [c[2] for c in decoded.column_metadata] == ["v"]


def test_prepared_for_a_write_has_no_result_columns() -> None:
    bind = PreparedMetadata((ColumnSpec("ks", "t", "k", INT),), (0,))
    decoded = driver_round_trip(PreparedResult(b"id", bind, RowsMetadata.skipped(0)))
    assert decoded.pk_indexes == [0]
    assert decoded.column_metadata is None


SCHEMA_CHANGES: list[tuple[SchemaChange, dict[str, Any]]] = [
    (
        SchemaChange(SchemaChangeType.CREATED, SchemaChangeTarget.KEYSPACE, "ks"),
        {"keyspace": "ks"},
    ),
    (
        SchemaChange(SchemaChangeType.UPDATED, SchemaChangeTarget.TABLE, "ks", "t"),
        {"keyspace": "ks", "table": "t"},
    ),
    (
        SchemaChange(SchemaChangeType.DROPPED, SchemaChangeTarget.TYPE, "ks", "address"),
        {"keyspace": "ks", "type": "address"},
    ),
]


@pytest.mark.parametrize(("change", "expected"), SCHEMA_CHANGES)
def test_schema_change_result_and_event(change: SchemaChange, expected: dict[str, Any]) -> None:
    result = driver_round_trip(SchemaChangeResult(change))
    event = driver_round_trip(SchemaChangeEvent(change), -1)
    for decoded in (result.schema_change_event, event.event_args):
        assert decoded["change_type"] == change.change_type.value
        assert decoded["target_type"] == change.target.value
        assert {key: decoded[key] for key in expected} == expected
    assert isinstance(event, EventMessage)
    assert event.event_type == "SCHEMA_CHANGE"


@pytest.mark.parametrize("target", [SchemaChangeTarget.FUNCTION, SchemaChangeTarget.AGGREGATE])
def test_schema_change_of_a_function_or_aggregate(target: SchemaChangeTarget) -> None:
    change = SchemaChange(SchemaChangeType.CREATED, target, "ks", "f", ("int", "text"))
    decoded = driver_round_trip(SchemaChangeResult(change)).schema_change_event
    descriptor = decoded[target.value.lower()]
    assert (descriptor.name, descriptor.argument_types) == ("f", ["int", "text"])


def test_topology_and_status_events() -> None:
    node = Inet(ip_address("10.0.0.7"), 9042)
    added = driver_round_trip(TopologyChangeEvent(TopologyChangeType.NEW_NODE, node), -1)
    assert added.stream_id == -1
    assert added.event_type == "TOPOLOGY_CHANGE"
    assert added.event_args == {"change_type": "NEW_NODE", "address": ("10.0.0.7", 9042)}
    node6 = Inet(ip_address("2001:db8::7"), 19042)
    down = driver_round_trip(StatusChangeEvent(StatusChangeType.DOWN, node6), -1)
    assert down.event_args == {"change_type": "DOWN", "address": ("2001:db8::7", 19042)}


_SIMPLE_ERRORS: list[tuple[ErrorCode, type]] = [
    (ErrorCode.SERVER_ERROR, ServerError),
    (ErrorCode.PROTOCOL_ERROR, ProtocolException),
    (ErrorCode.AUTHENTICATION_ERROR, BadCredentials),
    (ErrorCode.OVERLOADED, OverloadedErrorMessage),
    (ErrorCode.IS_BOOTSTRAPPING, IsBootstrappingErrorMessage),
    (ErrorCode.TRUNCATE_ERROR, TruncateError),
    (ErrorCode.CDC_WRITE_FAILURE, CDCWriteException),
    (ErrorCode.SYNTAX_ERROR, SyntaxException),
    (ErrorCode.CONFIG_ERROR, ConfigurationException),
]


@pytest.mark.parametrize(("code", "driver_class"), _SIMPLE_ERRORS)
def test_errors_with_only_a_message(code: ErrorCode, driver_class: type) -> None:
    decoded = driver_round_trip(ErrorResponse(code, f"problem {code.name}"))
    assert type(decoded) is driver_class
    assert decoded.code == code
    assert decoded.message == f"problem {code.name}"


def test_invalid_and_unauthorized_become_driver_exceptions() -> None:
    invalid = driver_round_trip(ErrorResponse(ErrorCode.INVALID, "unknown table t")).to_exception()
    assert isinstance(invalid, InvalidRequest)
    assert "unknown table t" in str(invalid)
    denied = driver_round_trip(ErrorResponse(ErrorCode.UNAUTHORIZED, "no")).to_exception()
    assert isinstance(denied, Unauthorized)


def test_unknown_error_codes_fall_back_to_the_generic_error() -> None:
    decoded = driver_round_trip(ErrorResponse(0x1700, "cas write unknown"))
    assert type(decoded) is ErrorMessage
    assert decoded.code == 0x1700


def test_unavailable() -> None:
    response = UnavailableResponse("not enough replicas", Consistency.QUORUM, 2, 1)
    error = driver_round_trip(response).to_exception()
    assert isinstance(error, Unavailable)
    assert (error.consistency, error.required_replicas, error.alive_replicas) == (4, 2, 1)


def test_write_timeout_with_every_write_type() -> None:
    for write_type in WriteType:
        response = WriteTimeoutResponse("timeout", Consistency.LOCAL_QUORUM, 1, 2, write_type)
        error = driver_round_trip(response).to_exception()
        assert isinstance(error, WriteTimeout)
        assert error.consistency == Consistency.LOCAL_QUORUM
        assert (error.received_responses, error.required_responses) == (1, 2)
        assert error.write_type == DriverWriteType.name_to_value[write_type.value]


def test_read_timeout() -> None:
    response = ReadTimeoutResponse("timeout", Consistency.ONE, 0, 1, data_present=True)
    error = driver_round_trip(response).to_exception()
    assert isinstance(error, ReadTimeout)
    assert (error.consistency, error.received_responses, error.required_responses) == (1, 0, 1)
    assert error.data_retrieved is True


def test_read_and_write_failure_v4_forms() -> None:
    read = driver_round_trip(
        ReadFailureResponse("rf", Consistency.ALL, 1, 3, failure_count=2, data_present=False)
    ).to_exception()
    assert isinstance(read, ReadFailure)
    assert (read.received_responses, read.required_responses, read.failures) == (1, 3, 2)
    assert read.data_retrieved is False
    write = driver_round_trip(
        WriteFailureResponse("wf", Consistency.TWO, 1, 2, 1, WriteType.BATCH_LOG)
    ).to_exception()
    assert isinstance(write, WriteFailure)
    assert write.failures == 1
    assert write.write_type == DriverWriteType.BATCH_LOG


def test_function_failure_already_exists_and_unprepared() -> None:
    function = driver_round_trip(
        FunctionFailureResponse("boom", "ks", "f", ("int", "text"))
    ).to_exception()
    assert isinstance(function, FunctionFailure)
    assert (function.keyspace, function.function, function.arg_types) == (
        "ks",
        "f",
        ["int", "text"],
    )
    exists = driver_round_trip(AlreadyExistsResponse("exists", "ks", "t")).to_exception()
    assert isinstance(exists, AlreadyExists)
    assert (exists.keyspace, exists.table) == ("ks", "t")
    keyspace_exists = driver_round_trip(AlreadyExistsResponse("exists", "ks")).to_exception()
    assert (keyspace_exists.keyspace, keyspace_exists.table) == ("ks", "")
    unprepared = driver_round_trip(UnpreparedResponse("unknown id", b"\xde\xad"))
    assert isinstance(unprepared, PreparedQueryNotFound)
    assert unprepared.info == b"\xde\xad"


def test_generic_error_refuses_codes_that_need_fields() -> None:
    from ringflow.cql import LocalProtocolError

    with pytest.raises(LocalProtocolError, match="needs its extra fields"):
        ErrorResponse(ErrorCode.UNAVAILABLE, "missing fields")


def test_tracing_id_warnings_and_custom_payload_on_a_response() -> None:
    trace = uuid.UUID("12345678-1234-5678-1234-567812345678")
    decoded = driver_round_trip(
        VoidResult(),
        5,
        tracing_id=trace,
        warnings=["Batch too large", "tombstones"],
        custom_payload={"k": b"v", "null": None},
    )
    assert decoded.trace_id == trace
    assert decoded.warnings == ["Batch too large", "tombstones"]
    assert decoded.custom_payload == {"k": b"v", "null": None}
    assert decoded.stream_id == 5


def test_lz4_compressed_responses_are_read_by_the_driver() -> None:
    columns = [ColumnSpec("ks", "t", "v", TEXT)]
    rows = tuple((("x" * 100).encode(),) for _ in range(50))
    frame = encode_message(
        RowsResult(RowsMetadata.describing(columns), rows), 8, compression=Compression.LZ4
    )
    assert frame[1] & 0x01
    decoded = driver_decode(frame, decompress=True)
    assert decoded.parsed_rows == [("x" * 100,)] * 50
    ready = encode_message(Ready(), 1, compression=Compression.LZ4)
    assert ready[1] & 0x01 == 0, "an empty body is never compressed"
