"""The node's budget of request bytes in flight, overall and per client address (pure).

Owns the accounting behind Cassandra's ``native_transport_max_request_data_in_flight`` and
``native_transport_max_request_data_in_flight_per_ip`` (``Config.java``; Cassandra reserves a
frame's size from an endpoint and a global reserve when its header arrives and releases it once
the answer is flushed, ``CQLMessageHandler``). Here a connection holds the bytes of the frame it
is reading (announced size, from the header on) plus the frames of its requests not yet
answered; the shell (``_server``) asks ``try_reserve`` before it reads more and, when refused,
stops reading that connection until ``release`` frees room (back-pressure, not refusal).

Rules:

* ``try_reserve`` is all or nothing, against both the address's and the global limit.
* ``force`` books bytes that are already in memory (a read chunk that ran past a frame
  boundary): they cannot be refused, only counted; the next ``try_reserve`` then waits.
* Every address's total is positive or absent; the sums always agree (``validate``).
"""

from __future__ import annotations

from ringflow.errors import InternalError, invariant


class RequestDataBudget:
    """Bytes of requests held, per client address and in all; limits are arguments."""

    __slots__ = ("_by_address", "_total", "limit", "limit_per_address")

    def __init__(self, limit: int, limit_per_address: int) -> None:
        if not 0 < limit_per_address <= limit:
            raise InternalError(
                f"budget limits must satisfy 0 < per address ({limit_per_address}) <= "
                f"overall ({limit})"
            )
        self.limit = limit
        self.limit_per_address = limit_per_address
        self._total = 0
        self._by_address: dict[str, int] = {}

    @property
    def total(self) -> int:
        return self._total

    def held_by(self, address: str) -> int:
        return self._by_address.get(address, 0)

    def fits(self, address: str, size: int) -> bool:
        """Whether ``try_reserve(address, size)`` would succeed now."""
        return (
            self._total + size <= self.limit
            and self.held_by(address) + size <= self.limit_per_address
        )

    def try_reserve(self, address: str, size: int) -> bool:
        """Book ``size`` bytes for ``address`` if both limits allow it; else book nothing."""
        if size < 0:
            raise InternalError(f"negative reservation {size}")
        if not self.fits(address, size):
            return False
        self.force(address, size)
        return True

    def force(self, address: str, size: int) -> None:
        """Book ``size`` bytes already in memory, even over the limits."""
        if size < 0:
            raise InternalError(f"negative reservation {size}")
        if size:
            self._by_address[address] = self.held_by(address) + size
            self._total += size

    def release(self, address: str, size: int) -> None:
        held = self.held_by(address)
        if not 0 <= size <= held:
            raise InternalError(f"release of {size} bytes for {address}, which holds {held}")
        if size == held:
            self._by_address.pop(address, None)
        else:
            self._by_address[address] = held - size
        self._total -= size

    def validate(self) -> None:
        invariant(
            sum(self._by_address.values()) == self._total,
            f"budget total {self._total} != sum over addresses",
        )
        invariant(all(held > 0 for held in self._by_address.values()), "an address holds 0 or less")
