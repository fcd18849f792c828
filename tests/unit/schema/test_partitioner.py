"""CDC log tables are placed by Scylla's CDCPartitioner, every other table by Murmur3.

Vectors: stream ids and their tokens from scylla-cdc.md §1 (decoded from Scylla's docs); a key
that is not 16 bytes long maps to the minimum token (Scylla issue #6570).
"""

from __future__ import annotations

import pytest

from ringflow.ring import MIN_TOKEN, murmur3_token
from ringflow.schema import cdc_partitioner_token, partition_token, token_of_key_bytes


@pytest.mark.parametrize(
    ("stream_id_hex", "token"),
    [
        ("7ffe0c687fcce86e0783343730000001", 9222822729861621870),
        ("80000000000000010d9ee5f1f4000001", -9223372036854775807),
        ("807ae73e07dbd4122e32d36e08000011", -9188777836090239982),
        ("ced00000000000009663c8dc500005a1", -3544332906740580352),
        ("ffffffffffffffff50e84c99d4000001", -1),
    ],
)
def test_log_partitions_sit_at_their_stream_token(stream_id_hex: str, token: int) -> None:
    stream_id = bytes.fromhex(stream_id_hex)
    assert cdc_partitioner_token(stream_id) == token
    assert partition_token("orders_scylla_cdc_log", (stream_id,)) == token
    assert token_of_key_bytes("orders_scylla_cdc_log", stream_id) == token


def test_the_minimum_token_of_a_stream_is_normalised_and_short_keys_map_to_the_minimum() -> None:
    assert cdc_partitioner_token(bytes.fromhex("8000000000000000") + bytes(8)) == 2**63 - 1
    assert cdc_partitioner_token(b"\x00") == MIN_TOKEN
    assert cdc_partitioner_token(b"") == MIN_TOKEN


def test_other_tables_use_murmur3() -> None:
    assert partition_token("orders", (b"a",)) == murmur3_token(b"a") == -8839064797231613815
    key = bytes.fromhex("7ffe0c687fcce86e0783343730000001")
    assert token_of_key_bytes("orders", key) == murmur3_token(key)
