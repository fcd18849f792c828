"""``encode_mutation``/``decode_mutation`` round-trip every Mutation, and reject anything else.

Method: Hypothesis builds arbitrary mutations (all atom kinds, int64 extremes, empty and binary
values) and checks ``decode(encode(m)) == m``; corrupted, truncated and foreign inputs must raise
MutationDecodeError (a ProtocolViolation) and nothing else, since hints and internode messages
decode through this path.
"""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.errors import ProtocolViolation
from ringflow.schema import (
    Cell,
    ClusteringBound,
    ComplexColumn,
    DeletionTime,
    LivenessInfo,
    Mutation,
    RangeTombstone,
    Row,
)
from ringflow.storage import (
    InvalidMutation,
    MutationDecodeError,
    decode_mutation,
    decode_mutations,
    encode_mutation,
    encode_mutations,
)

int64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([-(2**63), 0, 2**63 - 1]))
small_bytes = st.binary(max_size=6)
names = st.text(min_size=1, max_size=5)
deletions = st.builds(DeletionTime, int64, int64)


def cells(path: st.SearchStrategy[bytes | None]) -> st.SearchStrategy[Cell]:
    return st.builds(Cell, int64, small_bytes, st.integers(0, 2**31), int64, path)


complex_columns = st.builds(
    ComplexColumn, st.lists(cells(small_bytes), max_size=3).map(tuple), st.none() | deletions
)
rows = st.builds(
    Row,
    st.lists(small_bytes, max_size=3).map(tuple),
    st.none() | st.builds(LivenessInfo, int64, st.integers(0, 2**31), int64),
    st.none() | deletions,
    st.dictionaries(names, cells(st.none()) | complex_columns, max_size=3),
)
bounds = st.builds(ClusteringBound, st.lists(small_bytes, max_size=2).map(tuple), st.booleans())
mutations = st.builds(
    Mutation,
    names,
    names,
    st.lists(small_bytes, min_size=1, max_size=3).map(tuple),
    st.none() | deletions,
    st.none() | rows,
    st.lists(rows, max_size=3).map(tuple),
    st.lists(st.builds(RangeTombstone, bounds, bounds, deletions), max_size=2).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(mutation=mutations)
def test_round_trip(mutation: Mutation) -> None:
    encoded = encode_mutation(mutation)
    assert encoded[0] == 1
    assert decode_mutation(encoded) == mutation


@settings(max_examples=50, deadline=None)
@given(batch=st.lists(mutations, max_size=3))
def test_round_trip_of_many(batch: list[Mutation]) -> None:
    assert decode_mutations(encode_mutations(batch)) == batch


@settings(max_examples=300, deadline=None)
@given(mutation=mutations, data=st.data())
def test_corrupt_input_raises_decode_error_only(mutation: Mutation, data: st.DataObject) -> None:
    encoded = bytearray(encode_mutation(mutation))
    action = data.draw(st.sampled_from(["truncate", "flip", "append"]))
    if action == "truncate":
        encoded = encoded[: data.draw(st.integers(0, len(encoded) - 1))]
    elif action == "flip":
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] ^= data.draw(st.integers(1, 255))
    else:
        encoded += data.draw(st.binary(min_size=1, max_size=4))
    try:
        decoded = decode_mutation(bytes(encoded))
    except MutationDecodeError as error:
        assert isinstance(error, ProtocolViolation)
        assert str(error).startswith("mutation encoding")
    else:
        assert isinstance(decoded, Mutation)  # a flip may land on a value byte


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x02" + msgpack.packb([]),
        b"\x01" + msgpack.packb({"a": 1}),
        b"\x01" + msgpack.packb(["ks", "t", [1], None, None, [], []]),
        b"\x01" + msgpack.packb(["ks", "t", [b"k"], [2**64 - 1, 0], None, [], []]),
        b"\x01"
        + msgpack.packb(["ks", "t", [b"k"], None, None, [[[], None, None, [["c", [7]]]]], []]),
        b"\x01"
        + msgpack.packb(
            [
                "ks",
                "t",
                [b"k"],
                None,
                None,
                [[[], None, None, [["c", [True, [1, b"", 0, 0, None]]]]]],
                [],
            ]
        ),
        b"\x01\xc1",
    ],
)
def test_malformed_payloads(payload: bytes) -> None:
    with pytest.raises(MutationDecodeError):
        decode_mutation(payload)


def test_unencodable_mutation_is_invalid() -> None:
    mutation = Mutation("ks", "t", (b"k",), DeletionTime(2**64, 0))
    with pytest.raises(InvalidMutation):
        encode_mutation(mutation)
