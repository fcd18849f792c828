"""The balanced allocator's model of one allocation ring: replicated ownership, kept incrementally.

Reference: ``shared/reference/cassandra-core.md`` §4.2 (``ReplicationAwareTokenAllocator``). The
model is the allocation ring of one DC (or one rack): tokens, the unit (host) owning each, and
the group of each (the host itself, or its rack). The range ending at a token is replicated on
the first tokens of the first ``replicas`` distinct groups met walking clockwise from it, which is
exactly NetworkTopologyStrategy's choice when groups are racks and racks outnumber the RF, or when
groups are nodes in a one-rack DC (§3.2).

The quality measure is Cassandra's: squared deviations from the optimum ``opt = replicas / tokens``
of each token's replicated ownership, plus of each unit's replicated ownership per token; the unit
being allocated is weighted by the share of its tokens placed so far. Inserting a token changes
only the ranges whose replica walk passes its slot, so a candidate is scored locally.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Hashable

from ringflow.errors import invariant
from ringflow.ring._token_range import RING_SIZE_TOKENS

NEW_TOKEN = -1  # key of the candidate token in a delta map (existing tokens use their index)


def tokens_between(left: int, right: int) -> int:
    """Token count of ``(left, right]`` going round; the full ring when ``left == right``."""
    return (right - left - 1) % RING_SIZE_TOKENS + 1


class AllocationRing:
    """Tokens of one allocation ring with their units, groups and replicated ownership."""

    __slots__ = (
        "groups",
        "replicas",
        "token_ownership",
        "tokens",
        "unit_ownership",
        "unit_token_counts",
        "units",
    )

    def __init__(self, entries: list[tuple[int, Hashable, Hashable]], replicas: int) -> None:
        entries = sorted(entries, key=lambda entry: entry[0])
        self.tokens = [token for token, _, _ in entries]
        self.units = [unit for _, unit, _ in entries]
        self.groups = [group for _, _, group in entries]
        self.replicas = replicas
        self.token_ownership: list[float] = []
        self.unit_ownership: dict[Hashable, float] = {}
        self.unit_token_counts: dict[Hashable, int] = {}
        self.recompute()

    def __len__(self) -> int:
        return len(self.tokens)

    def group_count(self) -> int:
        return len(set(self.groups))

    def range_fraction(self, index: int) -> float:
        """Ring fraction of ``(tokens[index - 1], tokens[index]]``."""
        return tokens_between(self.tokens[index - 1], self.tokens[index]) / RING_SIZE_TOKENS

    def walk(self, start: int) -> list[int]:
        """Indices of the tokens replicating the range ending at ``tokens[start]``."""
        size = len(self.tokens)
        seen: set[Hashable] = set()
        chosen = []
        for step in range(size):
            index = (start + step) % size
            if self.groups[index] not in seen:
                seen.add(self.groups[index])
                chosen.append(index)
                if len(chosen) == self.replicas:
                    break
        return chosen

    def recompute(self) -> None:
        """Replicated ownership of every token and unit, from scratch."""
        self.token_ownership = [0.0] * len(self.tokens)
        self.unit_ownership = defaultdict(float)
        self.unit_token_counts = defaultdict(int)
        for unit in self.units:
            self.unit_token_counts[unit] += 1
        for index in range(len(self.tokens)):
            fraction = self.range_fraction(index)
            for chosen in self.walk(index):
                self.token_ownership[chosen] += fraction
                self.unit_ownership[self.units[chosen]] += fraction

    def validate(self, tolerance: float = 1e-9) -> None:
        """The incrementally kept ownership equals a recomputation (costs a full recompute)."""
        token_ownership = list(self.token_ownership)
        unit_ownership = dict(self.unit_ownership)
        self.recompute()
        invariant(
            all(
                abs(a - b) <= tolerance
                for a, b in zip(token_ownership, self.token_ownership, strict=True)
            ),
            "incremental token ownership drifted from a recomputation",
        )
        invariant(
            all(
                abs(unit_ownership.get(u, 0.0) - v) <= tolerance
                for u, v in self.unit_ownership.items()
            ),
            "incremental unit ownership drifted from a recomputation",
        )

    def _walk_with(self, start: int, slot: int, group: Hashable) -> list[int]:
        """Like :meth:`walk` on the ring with a new token at ``slot`` (virtual indices)."""
        size = len(self.tokens) + 1
        seen: set[Hashable] = set()
        chosen = []
        for step in range(size):
            virtual = (start + step) % size
            index = NEW_TOKEN if virtual == slot else (virtual if virtual < slot else virtual - 1)
            token_group = group if index == NEW_TOKEN else self.groups[index]
            if token_group not in seen:
                seen.add(token_group)
                chosen.append(index)
                if len(chosen) == self.replicas:
                    break
        return chosen

    def _affected_ranges(self, split_index: int) -> list[int]:
        """The split range, then the ranges before it whose replica walk reaches the new slot."""
        size = len(self.tokens)
        affected = [split_index]
        groups_before_slot: set[Hashable] = set()
        for offset in range(1, size):
            index = (split_index - offset) % size
            groups_before_slot.add(self.groups[index])
            if len(groups_before_slot) >= self.replicas:
                break
            affected.append(index)
        return affected

    def ownership_delta(
        self, token: int, unit: Hashable, group: Hashable
    ) -> tuple[dict[int, float], dict[Hashable, float]]:
        """Change of token and unit ownership if ``token`` of ``unit`` were inserted."""
        slot = bisect.bisect_left(self.tokens, token)
        size = len(self.tokens)
        split_index = slot % size
        token_delta: defaultdict[int, float] = defaultdict(float)
        unit_delta: defaultdict[Hashable, float] = defaultdict(float)

        def add(indices: list[int], fraction: float) -> None:
            for index in indices:
                token_delta[index] += fraction
                unit_delta[unit if index == NEW_TOKEN else self.units[index]] += fraction

        for index in self._affected_ranges(split_index):
            fraction = self.range_fraction(index)
            add(self.walk(index), -fraction)
            virtual = index if index < slot else index + 1
            if index == split_index:
                left_part = tokens_between(self.tokens[index - 1], token) / RING_SIZE_TOKENS
                add(self._walk_with(slot, slot, group), left_part)
                add(self._walk_with(virtual, slot, group), fraction - left_part)
            else:
                add(self._walk_with(virtual, slot, group), fraction)
        return token_delta, unit_delta

    def insert_unscored(self, token: int, unit: Hashable, group: Hashable) -> None:
        """Add ``token`` without updating the ownership (call :meth:`recompute` before use)."""
        slot = bisect.bisect_left(self.tokens, token)
        invariant(slot == len(self.tokens) or self.tokens[slot] != token, f"token {token} taken")
        self.tokens.insert(slot, token)
        self.units.insert(slot, unit)
        self.groups.insert(slot, group)
        self.token_ownership.insert(slot, 0.0)

    def insert(self, token: int, unit: Hashable, group: Hashable) -> None:
        """Add ``token`` and update the ownership incrementally."""
        if not self.tokens:
            self.tokens, self.units, self.groups = [token], [unit], [group]
            self.recompute()
            return
        token_delta, unit_delta = self.ownership_delta(token, unit, group)
        slot = bisect.bisect_left(self.tokens, token)
        invariant(slot == len(self.tokens) or self.tokens[slot] != token, f"token {token} taken")
        for index, delta in token_delta.items():
            if index != NEW_TOKEN:
                self.token_ownership[index] += delta
        self.tokens.insert(slot, token)
        self.units.insert(slot, unit)
        self.groups.insert(slot, group)
        self.token_ownership.insert(slot, token_delta.get(NEW_TOKEN, 0.0))
        for owner, delta in unit_delta.items():
            self.unit_ownership[owner] = self.unit_ownership.get(owner, 0.0) + delta
        self.unit_token_counts[unit] = self.unit_token_counts.get(unit, 0) + 1
