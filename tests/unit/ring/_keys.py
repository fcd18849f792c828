"""Key generators for the token tests: lengths 15/16/17 and tail bytes >= 0x80 favoured.

Those are where Cassandra's signed-byte quirk bites (cassandra-core.md §1.1, §12 item 1).
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

FAVOURED_LENGTHS = (15, 16, 17)


def random_key(rng: random.Random, max_length: int = 64) -> bytes:
    """A key of length 0..max_length; about a third of lengths are 15/16/17, half the bytes high."""
    favoured = rng.random() < 0.35
    length = rng.choice(FAVOURED_LENGTHS) if favoured else rng.randint(0, max_length)
    return bytes(
        rng.randint(0x80, 0xFF) if rng.random() < 0.5 else rng.randint(0x00, 0x7F)
        for _ in range(length)
    )


def keys(min_size: int = 1, max_size: int = 64) -> st.SearchStrategy[bytes]:
    """Hypothesis keys with the same bias as :func:`random_key`."""
    high_bytes = st.integers(0x80, 0xFF)
    any_bytes = st.integers(0x00, 0xFF)
    byte = st.one_of(high_bytes, any_bytes)
    favoured = st.sampled_from([n for n in FAVOURED_LENGTHS if min_size <= n <= max_size])
    length = st.one_of(favoured, st.integers(min_size, max_size))
    return length.flatmap(lambda n: st.lists(byte, min_size=n, max_size=n).map(bytes))
