"""Hosts and the tokens they own: the sorted ring, primary owners, and the ranges of a host.

Reference: ``shared/reference/cassandra-core.md`` §1.2 (``TokenMetadata.firstTokenIndex``,
``ringIterator``). Rules:

* each ring token belongs to exactly one host; a token claimed twice is a configuration error;
* the primary owner of a token ``t`` is the owner of the first ring token ``>= t`` (an exact match
  belongs to that node), wrapping to the first ring token past the largest one;
* host ring token ``ring[i]`` owns ``(ring[i - 1], ring[i]]``; a one-token ring owns everything.

:class:`TokenMetadata` is an immutable value: :meth:`TokenMetadata.with_tokens` returns a new one.
Hosts are numbered in the order they were given; vectorised lookups return those host indices.
"""

from __future__ import annotations

import bisect
import operator
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ringflow.errors import invariant
from ringflow.ring._errors import RingError
from ringflow.ring._sharder import MAX_TOKEN, MIN_TOKEN, check_token
from ringflow.ring._token_index import TokenIndex
from ringflow.ring._token_range import TokenRange

Int64Array = npt.NDArray[np.int64]
IndexArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Host:
    """One physical node: its identity, where it listens, and its place in the topology."""

    host_id: uuid.UUID
    endpoint: str
    dc: str
    rack: str

    def __post_init__(self) -> None:
        if not isinstance(self.host_id, uuid.UUID):
            raise RingError(f"host_id must be a uuid.UUID, got {self.host_id!r}")
        for name in ("endpoint", "dc", "rack"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise RingError(f"host {name} must be a non-empty string, got {value!r}")

    def __hash__(self) -> int:
        # Hosts key the replica sets, plans and responses of every request: hashing the id's
        # integer (equal hosts have equal ids) costs one call, not a tuple of four fields and
        # ``UUID.__hash__``, and is the same in every process (no string hash in it).
        return hash(self.host_id.int)

    def __str__(self) -> str:
        return f"{self.endpoint} ({self.dc}/{self.rack})"


def _checked_tokens(host: Host, tokens: Iterable[int]) -> list[int]:
    token_list = [check_token(token) for token in tokens]
    if not token_list:
        raise RingError(f"host {host} has no tokens; every ring member needs at least one")
    if len(set(token_list)) != len(token_list):
        raise RingError(f"host {host} lists a token twice: {sorted(token_list)}")
    return token_list


class TokenMetadata:
    """The ring: which host owns each token, sorted for lookups (immutable)."""

    __slots__ = (
        "_host_index",
        "_hosts",
        "_index",
        "_owner_hosts",
        "_owner_indices",
        "_racks_by_dc",
        "_ring",
        "_ring_array",
        "_tokens_of",
    )

    def __init__(self, tokens_by_host: Mapping[Host, Iterable[int]] | None = None) -> None:
        tokens_by_host = tokens_by_host or {}
        hosts: list[Host] = []
        tokens_of: dict[Host, tuple[int, ...]] = {}
        owner_of_token: dict[int, int] = {}
        for host, tokens in tokens_by_host.items():
            if not isinstance(host, Host):
                raise RingError(f"ring members must be Host values, got {host!r}")
            token_list = _checked_tokens(host, tokens)
            for token in token_list:
                if token in owner_of_token:
                    other = hosts[owner_of_token[token]]
                    raise RingError(f"token {token} is claimed by both {other} and {host}")
                owner_of_token[token] = len(hosts)
            tokens_of[host] = tuple(sorted(token_list))
            hosts.append(host)
        self._check_unique_identities(hosts)
        self._hosts = tuple(hosts)
        self._host_index = {host: index for index, host in enumerate(hosts)}
        self._tokens_of = tokens_of
        self._ring = tuple(sorted(owner_of_token))
        self._ring_array: Int64Array = np.array(self._ring, dtype=np.int64)
        self._index = TokenIndex(self._ring_array)
        self._owner_hosts = tuple(hosts[owner_of_token[token]] for token in self._ring)
        self._racks_by_dc: dict[str, set[str]] = {}
        for host in hosts:
            self._racks_by_dc.setdefault(host.dc, set()).add(host.rack)
        self._owner_indices: IndexArray = np.array(
            [owner_of_token[token] for token in self._ring], dtype=np.intp
        )
        self.validate()

    @staticmethod
    def _check_unique_identities(hosts: list[Host]) -> None:
        for attribute in ("host_id", "endpoint"):
            seen: dict[object, Host] = {}
            for host in hosts:
                value = getattr(host, attribute)
                if value in seen:
                    raise RingError(f"hosts {seen[value]} and {host} share the {attribute} {value}")
                seen[value] = host

    def validate(self) -> None:
        """Check the internal invariants (sorted ring, owners consistent with host tokens)."""
        invariant(len(self._ring) == len(self._owner_indices), "ring and owners differ in length")
        invariant(
            all(a < b for a, b in zip(self._ring, self._ring[1:], strict=False)),
            "ring tokens must be strictly increasing",
        )
        invariant(
            sum(len(tokens) for tokens in self._tokens_of.values()) == len(self._ring),
            "every host token must be on the ring exactly once",
        )

    # -- hosts and tokens ------------------------------------------------------------------

    @property
    def hosts(self) -> tuple[Host, ...]:
        """Hosts in the order given; the vectorised lookups return indices into this tuple."""
        return self._hosts

    @property
    def sorted_tokens(self) -> tuple[int, ...]:
        return self._ring

    @property
    def sorted_tokens_array(self) -> Int64Array:
        """The ring as an int64 array (a read-only view)."""
        view = self._ring_array.view()
        view.flags.writeable = False
        return view

    @property
    def owner_indices(self) -> IndexArray:
        """Host index of each ring position (parallel to :attr:`sorted_tokens`, read-only)."""
        view = self._owner_indices.view()
        view.flags.writeable = False
        return view

    def __len__(self) -> int:
        return len(self._ring)

    def __contains__(self, host: object) -> bool:
        return host in self._host_index

    def host_index(self, host: Host) -> int:
        try:
            return self._host_index[host]
        except KeyError:
            raise RingError(f"host {host} is not in the ring") from None

    def tokens_of(self, host: Host) -> tuple[int, ...]:
        """The host's tokens, sorted."""
        return self._tokens_of[self._hosts[self.host_index(host)]]

    def datacenters(self) -> dict[str, list[Host]]:
        """Hosts of each DC, in host order; DCs in order of first appearance."""
        by_dc: dict[str, list[Host]] = {}
        for host in self._hosts:
            by_dc.setdefault(host.dc, []).append(host)
        return by_dc

    def racks_of(self, dc: str) -> set[str]:
        """Racks of ``dc`` (empty for a DC with no host)."""
        return set(self._racks_by_dc.get(dc, ()))

    @property
    def owner_hosts(self) -> tuple[Host, ...]:
        """Host owning each ring position (parallel to :attr:`sorted_tokens`)."""
        return self._owner_hosts

    def with_tokens(self, host: Host, tokens: Iterable[int]) -> TokenMetadata:
        """A new ring with ``host`` added (or its tokens replaced)."""
        mapping: dict[Host, Iterable[int]] = dict(self._tokens_of)
        mapping[host] = list(tokens)
        return TokenMetadata(mapping)

    def without_host(self, host: Host) -> TokenMetadata:
        """A new ring with ``host`` and its tokens removed."""
        self.host_index(host)
        return TokenMetadata({h: t for h, t in self._tokens_of.items() if h != host})

    # -- lookups ---------------------------------------------------------------------------

    def first_token_index(self, token: int) -> int:
        """Ring index of the first token ``>= token``, wrapping to 0 (Cassandra's firstToken)."""
        check_token(token)
        if not self._ring:
            raise RingError("the ring is empty: no host owns any token")
        index = bisect.bisect_left(self._ring, token)
        return 0 if index == len(self._ring) else index

    def owner_at(self, ring_index: int) -> Host:
        """Host owning the ring token at ``ring_index``."""
        return self._owner_hosts[ring_index]

    def primary_owner(self, token: int) -> Host:
        """The host whose range ``(predecessor, ring_token]`` holds ``token``."""
        return self.owner_at(self.first_token_index(token))

    def ring_walk(self, token: int) -> Iterator[int]:
        """Ring indices clockwise from the first token ``>= token``, each once (ringIterator)."""
        start = self.first_token_index(token)
        size = len(self._ring)
        for step in range(size):
            yield (start + step) % size

    def range_ending_at(self, ring_index: int) -> TokenRange:
        """``(predecessor, ring[ring_index]]``; the full ring when there is one token."""
        return TokenRange(self._ring[ring_index - 1], self._ring[ring_index])

    def ranges_of(self, host: Host) -> list[TokenRange]:
        """The primary ranges of ``host``, one per token, in ring order."""
        index = self.host_index(host)
        positions = np.flatnonzero(self._owner_indices == index).tolist()
        return [self.range_ending_at(position) for position in positions]

    def owners_of(self, tokens: npt.ArrayLike) -> IndexArray:
        """Host index of the primary owner of each token (vectorised :meth:`primary_owner`)."""
        positions = self.first_token_indices(tokens)
        owners: IndexArray = self._owner_indices[positions]
        return owners

    def first_token_indices(self, tokens: npt.ArrayLike) -> IndexArray:
        """Vectorised :meth:`first_token_index` over an array of int64 tokens."""
        if not self._ring:
            raise RingError("the ring is empty: no host owns any token")
        token_array = as_token_array(tokens)
        return self._index.first_indices(token_array)

    def __repr__(self) -> str:
        return f"TokenMetadata(hosts={len(self._hosts)}, tokens={len(self._ring)})"


def as_token_array(tokens: npt.ArrayLike) -> Int64Array:
    """``tokens`` as an int64 array; values outside int64 raise RingError."""
    if isinstance(tokens, np.ndarray) and tokens.dtype == np.int64:
        return tokens
    array = np.asarray(tokens)
    if array.dtype == np.int64:
        return array
    if array.dtype.kind in "iu" and array.size:
        low, high = int(array.min()), int(array.max())
        if low < MIN_TOKEN or high > MAX_TOKEN:
            raise RingError(f"token {low if low < MIN_TOKEN else high} is outside the int64 range")
        return array.astype(np.int64)
    if array.dtype.kind == "O" or array.size == 0:
        try:
            values = [check_token(operator.index(token)) for token in array.ravel()]
            return np.array(values, dtype=np.int64).reshape(array.shape)
        except (TypeError, ValueError) as error:
            raise RingError(f"tokens must be integers: {error}") from error
    raise RingError(f"tokens must be an integer array, got dtype {array.dtype}")
