"""Merkle trees over a token range for anti-entropy repair: a pure core (no I/O).

cassandra-core.md §7.3 and replication-and-repair.md §4.1 (Cassandra's ``utils/MerkleTree.java``
and ``repair/ValidationManager.java``); seed 003 "Merkle repair". Rules:

* A tree covers one non-wrapping token range ``(low, high]``, cut into ``2**depth`` leaves of
  (nearly) equal token counts: leaf ``i`` is ``(boundary(i), boundary(i + 1)]`` with
  ``boundary(i) = low + floor(i * (high - low) / 2**depth)`` in exact integer arithmetic.
* A partition enters as (token, digest): its 128-bit ``partition_digest`` (MD5 over the
  canonical stored partition: key, deletions, static row, range tombstones, every row's
  clustering, liveness and cells with value, timestamp and TTL). A leaf is the XOR of the
  digests of its partitions, as Cassandra's leaves, so the order partitions are added in never
  matters and a tree can be built by scanning a range page by page, never holding it.
* An inner node is MD5 of its two children (16 bytes each), so a changed leaf changes exactly
  its ancestors. Two trees compare from the root down, only into children that differ.
* ``depth = min(ceil(log2(partitions)), max depth)`` (``ValidationManager``), the max depth
  being ``min(20, the depth the memory budget allows)``: ``repair_session_max_tree_depth``
  defaults to 20 in Cassandra. A replica builds at the max depth while scanning (it does not
  know the count beforehand) and folds to the depth the count gives: folding XORs sibling
  leaves, which is exactly the leaf of the shallower tree (leaf ``i`` at depth ``d`` is leaf
  ``i >> (D - d)`` at depth ``D``'s fold). ``TreeBuilder`` does this holding only the leaves
  that have partitions while they are few (a range of 50 partitions costs 50 entries, not the
  2**20 leaves of the max depth and their fold), the whole leaf array once they are many.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Final

from ringflow.errors import InvalidRequest, invariant

DIGEST_BYTES: Final = 16
MAX_TREE_DEPTH: Final = 20
"""Cassandra's ``repair_session_max_tree_depth`` default (2**20 leaves)."""
BYTES_PER_LEAF: Final = 2 * DIGEST_BYTES
"""A leaf's digest plus its share of the inner nodes (a full binary tree has ~2 nodes a leaf)."""
DEFAULT_TREE_MEMORY_BYTES: Final = 16 * 1024 * 1024
_MIN_TOKEN: Final = -(2**63)
_MAX_TOKEN: Final = 2**63 - 1
_ZERO: Final = bytes(DIGEST_BYTES)


def max_depth_for_bytes(budget_bytes: int, *, cap: int = MAX_TREE_DEPTH) -> int:
    """The deepest tree whose nodes fit ``budget_bytes`` (at least 0), never above ``cap``."""
    if budget_bytes < BYTES_PER_LEAF:
        return 0
    return min(cap, int(math.log2(budget_bytes // BYTES_PER_LEAF)))


def depth_for(partitions: int, max_depth: int) -> int:
    """``min(ceil(log2(partitions)), max_depth)``; 0 for an empty or one-partition range."""
    if partitions < 0 or max_depth < 0:
        raise InvalidRequest(f"depth_for: negative input {partitions}, {max_depth}")
    if partitions <= 1:
        return 0
    return min((partitions - 1).bit_length(), max_depth)


def _check_depth(depth: int) -> None:
    if not 0 <= depth <= MAX_TREE_DEPTH:
        raise InvalidRequest(f"tree depth must be in [0, {MAX_TREE_DEPTH}], got {depth}")


def _leaf_index(low: int, high: int, depth: int, token: int) -> int:
    """The leaf of a depth-``depth`` tree over ``(low, high]`` that holds ``token``."""
    if not low < token <= high:
        raise InvalidRequest(f"token {token} is not in ({low}, {high}]")
    return (((token - low) << depth) - 1) // (high - low)


def _check_range(low: int, high: int) -> None:
    if not (_MIN_TOKEN <= low < high <= _MAX_TOKEN):
        raise InvalidRequest(
            f"a Merkle tree covers a non-wrapping range (low, high], got ({low}, {high}]"
        )


@dataclass(slots=True)
class MerkleTree:
    """The leaves of one tree (module docstring); inner nodes are computed on demand."""

    low: int
    high: int
    depth: int
    leaves: list[int] = field(default_factory=list)
    """XOR of the digests of each leaf's partitions, as 128-bit ints (0: empty leaf)."""
    partitions: int = 0

    def __post_init__(self) -> None:
        _check_range(self.low, self.high)
        _check_depth(self.depth)
        if not self.leaves:
            self.leaves = [0] * (1 << self.depth)
        invariant(len(self.leaves) == 1 << self.depth, "a tree has 2**depth leaves")

    @classmethod
    def empty(cls, low: int, high: int, depth: int) -> MerkleTree:
        return cls(low, high, depth)

    def boundary(self, index: int) -> int:
        """The exclusive start of leaf ``index`` (``index == 2**depth``: ``high``)."""
        return self.low + (((self.high - self.low) * index) >> self.depth)

    def leaf_range(self, index: int) -> tuple[int, int]:
        return self.boundary(index), self.boundary(index + 1)

    def leaf_of(self, token: int) -> int:
        """The leaf holding ``token``, which must lie in ``(low, high]``."""
        return _leaf_index(self.low, self.high, self.depth, token)

    def add(self, token: int, digest: bytes) -> None:
        """Hash one partition into its leaf (order-independent: XOR)."""
        invariant(len(digest) == DIGEST_BYTES, "a partition digest is 16 bytes")
        self.leaves[self.leaf_of(token)] ^= int.from_bytes(digest, "big")
        self.partitions += 1

    def folded(self, depth: int) -> MerkleTree:
        """The same data in a tree of ``depth`` (at most this one's): sibling leaves XORed."""
        if not 0 <= depth <= self.depth:
            raise InvalidRequest(f"cannot fold a depth {self.depth} tree to depth {depth}")
        leaves = self.leaves
        for _ in range(self.depth - depth):
            leaves = [leaves[i] ^ leaves[i + 1] for i in range(0, len(leaves), 2)]
        return MerkleTree(self.low, self.high, depth, list(leaves), self.partitions)

    def levels(self) -> list[list[bytes]]:
        """Every level's node hashes, root level first, leaves last."""
        level = [leaf.to_bytes(DIGEST_BYTES, "big") for leaf in self.leaves]
        levels = [level]
        while len(level) > 1:
            level = [_inner(level[i], level[i + 1]) for i in range(0, len(level), 2)]
            levels.append(level)
        levels.reverse()
        return levels

    def root(self) -> bytes:
        return self.levels()[0][0]

    def to_bytes(self) -> bytes:
        """The leaves, concatenated (16 bytes each), for the wire."""
        return b"".join(leaf.to_bytes(DIGEST_BYTES, "big") for leaf in self.leaves)

    @classmethod
    def from_bytes(
        cls, low: int, high: int, depth: int, data: bytes, partitions: int
    ) -> MerkleTree:
        if not 0 <= depth <= MAX_TREE_DEPTH or len(data) != DIGEST_BYTES << depth:
            raise InvalidRequest(
                f"a depth {depth} tree is {DIGEST_BYTES << depth} bytes, got {len(data)}"
            )
        leaves = [
            int.from_bytes(data[i : i + DIGEST_BYTES], "big")
            for i in range(0, len(data), DIGEST_BYTES)
        ]
        return cls(low, high, depth, leaves, partitions)


class TreeBuilder:
    """A range's tree built at ``max_depth`` while its partitions are scanned, then given at the
    depth their count calls for (module docstring): ``add`` each partition, then ``tree()``.

    Leaves with partitions are kept in a dict while they are at most ``2**max_depth / 8`` (its
    entries cost a few times a list slot), then in the whole leaf array: memory never passes
    about that of the dense tree, and time is linear in the partitions plus the leaves of the
    tree given, not in ``2**max_depth``."""

    __slots__ = ("_dense", "_dense_after", "_sparse", "high", "low", "max_depth", "partitions")

    def __init__(self, low: int, high: int, max_depth: int) -> None:
        _check_range(low, high)
        _check_depth(max_depth)
        self.low, self.high, self.max_depth = low, high, max_depth
        self.partitions = 0
        self._sparse: dict[int, int] = {}
        """The leaves with partitions, while ``_dense`` is None."""
        self._dense: list[int] | None = None
        self._dense_after = (1 << max_depth) >> 3

    def add(self, token: int, digest: bytes) -> None:
        """Hash one partition into its leaf at the max depth (order-independent: XOR)."""
        invariant(len(digest) == DIGEST_BYTES, "a partition digest is 16 bytes")
        index = _leaf_index(self.low, self.high, self.max_depth, token)
        value = int.from_bytes(digest, "big")
        self.partitions += 1
        if self._dense is not None:
            self._dense[index] ^= value
            return
        sparse = self._sparse
        sparse[index] = sparse.get(index, 0) ^ value
        if len(sparse) > self._dense_after:
            dense = [0] * (1 << self.max_depth)
            for leaf, xor in sparse.items():
                dense[leaf] = xor
            self._sparse, self._dense = {}, dense

    def tree(self, depth: int | None = None) -> MerkleTree:
        """The tree at ``depth`` (default ``depth_for(partitions, max_depth)``)."""
        if depth is None:
            depth = depth_for(self.partitions, self.max_depth)
        if not 0 <= depth <= self.max_depth:
            raise InvalidRequest(f"cannot fold a depth {self.max_depth} tree to depth {depth}")
        if self._dense is not None:
            whole = MerkleTree(self.low, self.high, self.max_depth, self._dense, self.partitions)
            return whole.folded(depth)
        shift = self.max_depth - depth
        leaves = [0] * (1 << depth)
        for leaf, xor in self._sparse.items():
            leaves[leaf >> shift] ^= xor
        return MerkleTree(self.low, self.high, depth, leaves, self.partitions)


def _inner(left: bytes, right: bytes) -> bytes:
    if left == _ZERO and right == _ZERO:
        return _ZERO  # an empty subtree hashes as an empty leaf: cheap and still unambiguous
    return hashlib.md5(left + right).digest()


def differing_leaves(first: MerkleTree, second: MerkleTree) -> list[int]:
    """The indexes of the leaves that differ, found from the root down (same range and depth)."""
    if (first.low, first.high, first.depth) != (second.low, second.high, second.depth):
        raise InvalidRequest(
            f"trees of ({first.low}, {first.high}] depth {first.depth} and "
            f"({second.low}, {second.high}] depth {second.depth} cannot be compared"
        )
    levels_a, levels_b = first.levels(), second.levels()
    frontier = [0] if levels_a[0][0] != levels_b[0][0] else []
    for level in range(1, len(levels_a)):
        row_a, row_b = levels_a[level], levels_b[level]
        frontier = [c for i in frontier for c in (2 * i, 2 * i + 1) if row_a[c] != row_b[c]]
    return frontier


def leaf_ranges(tree: MerkleTree, leaves: list[int]) -> list[tuple[int, int]]:
    """The token ranges ``(low, high]`` of ``leaves`` (sorted), neighbours joined."""
    ranges: list[tuple[int, int]] = []
    for index in sorted(leaves):
        low, high = tree.leaf_range(index)
        if ranges and ranges[-1][1] == low:
            ranges[-1] = (ranges[-1][0], high)
        elif low < high:
            ranges.append((low, high))
    return ranges


def difference(first: MerkleTree, second: MerkleTree) -> list[tuple[int, int]]:
    """The largest contiguous token ranges where the two trees' leaves differ."""
    return leaf_ranges(first, differing_leaves(first, second))


def common_depth(trees: list[MerkleTree]) -> list[MerkleTree]:
    """The trees folded to the shallowest one's depth, so every pair compares."""
    if not trees:
        return []
    depth = min(tree.depth for tree in trees)
    return [tree if tree.depth == depth else tree.folded(depth) for tree in trees]
