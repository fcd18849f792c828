"""The REPAIR_REQ/REPAIR_RSP wire (``cluster.service._repair_codec``): every message round-trips,
and malformed payloads are ``InternodeProtocolError`` (the peer's fault), nothing else."""

from __future__ import annotations

import uuid

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringflow.cluster import RepairOptions, RepairSummary, TableSummary
from ringflow.cluster._messages import InternodeProtocolError
from ringflow.cluster.service._repair import encode_repair_message_any
from ringflow.cluster.service._repair_codec import (
    DigestsAnswer,
    DigestsRequest,
    PullKeysRequest,
    RunAnswer,
    RunRequest,
    SyncAnswer,
    SyncKeysRequest,
    SyncRequest,
    TreeAnswer,
    ValidateRequest,
    decode_repair_message,
)
from ringflow.cluster.service._streaming import Page, PullRequest
from ringflow.schema import Mutation

TOKEN_RANGES = st.tuples(st.integers(-(2**63), 2**63 - 3), st.integers(1, 2**40)).map(
    lambda pair: (pair[0], min(2**63 - 1, pair[0] + pair[1]))
)
KEYS = st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=3).map(tuple)
NAMES = st.text(min_size=1, max_size=10)


@given(
    NAMES,
    NAMES,
    TOKEN_RANGES,
    st.integers(0, 20),
    st.lists(TOKEN_RANGES, max_size=4),
    st.lists(KEYS, max_size=5),
)
def test_every_message_round_trips(
    keyspace: str,
    table: str,
    token_range: tuple[int, int],
    depth: int,
    ranges: list[tuple[int, int]],
    keys: list[tuple[bytes, ...]],
) -> None:
    low, high = token_range
    messages = [
        ValidateRequest(keyspace, table, low, high, depth),
        TreeAnswer(2, 7, bytes(64)),
        SyncRequest(keyspace, table, "127.0.0.2:7000", tuple(ranges)),
        SyncAnswer(3, 1000),
        DigestsRequest(keyspace, table, tuple(ranges), 100),
        DigestsAnswer(tuple((i, key, bytes(16)) for i, key in enumerate(keys))),
        DigestsAnswer(None),
        SyncKeysRequest(keyspace, table, "127.0.0.3:7000", tuple(keys)),
        PullKeysRequest(keyspace, table, tuple(keys)),
        PullRequest(keyspace, table, low, high, None, 10),
        Page(None, (Mutation(keyspace, table, (b"k",)),)),
    ]
    for message in messages:
        assert decode_repair_message(encode_repair_message_any(message)) == message


def test_run_request_and_answer_round_trip() -> None:
    options = RepairOptions("ks", ("t",), primary_range=True, start_token=-5, end_token=5)
    assert decode_repair_message(encode_repair_message_any(RunRequest(options))) == RunRequest(
        options
    )
    summary = RepairSummary(str(uuid.uuid1()), "ks", False, "127.0.0.1:7000")
    summary.tables.append(TableSummary("ks", "t", ranges=3, ranges_failed=[["(1,2]", "down"]]))
    answer = decode_repair_message(encode_repair_message_any(RunAnswer(summary)))
    assert isinstance(answer, RunAnswer) and answer.summary == summary
    assert answer.summary.failed_ranges == 1


@pytest.mark.parametrize(
    "body",
    [
        ["validate", "ks", "t", 5, 5, 3],  # empty range
        ["validate", "ks", "t", 0, 5, 21],  # too deep
        ["tree", 1, 2, "not bytes"],
        ["sync", "ks", "t", "a", [[1]]],
        ["listing", [[1, [], b"x"]]],  # a key needs a part
        ["pull_keys", "ks", "t", [["text"]]],
        ["run", "{not json"],
        ["result", "{not json"],
        ["result", '{"tables": 3}'],
        ["nonsense"],
        [],
    ],
)
def test_malformed_payloads_are_protocol_errors(body: list[object]) -> None:
    with pytest.raises(InternodeProtocolError):
        decode_repair_message(msgpack.packb(body, use_bin_type=True))
