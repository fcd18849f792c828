"""Range reads (cassandra-core.md §5, §7.2): cutting a token range into pieces, reconciling the
replicas' answers, and coordinating one range read from its first piece to its last.

Owns ``split_range``/``join_pieces``/``reconcile_range`` (pure), ``RangeRead`` (one range read in
flight) and ``RangeReads`` (the coordinator's range reads and the replica side of RANGE_READ).

Rules:

* The requested token range is cut at every ring token (wrap-around unwrapped), neighbouring
  pieces with the same replicas are joined, and the pieces are read one after the other in
  token order: each from blockFor live replicas (``Unavailable`` before sending otherwise) with
  a RANGE_READ (the coordinator reads its own store), the answers merged per partition with
  ``merge_mutations``.
* Every replica sends at most the partitions still wanted; when one stops short, the result
  stops before the first token that replica did not cover and the caller resumes from there.
* A failed replica is ``ReadFailure``, no answer by the deadline (``range_timeout_ms`` for the
  whole range read, Cassandra's ``range_request_timeout``) ``ReadTimeout``.
* No read repair and no digests for range reads (yet).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ringflow.cluster._consistency import ConsistencyLevel, assure_sufficient_live_replicas
from ringflow.cluster._coordinator import base_token
from ringflow.cluster._messages import Verb
from ringflow.cluster._read_path import select_contacts
from ringflow.cluster.service import _codec
from ringflow.cluster.service._parts import NodeParts
from ringflow.errors import ReadFailure, ReadTimeout
from ringflow.ring import MAX_TOKEN, MIN_TOKEN, Host
from ringflow.runtime import TimerHandle
from ringflow.schema import Mutation, merge_mutations

RANGE_ANSWER_MAX_BYTES = 4 * 1024 * 1024
"""A replica stops its RANGE_READ answer after the partition that reaches this size."""
_RANGE_REQUEST_IDS = 1 << 62
"""Range read request ids start here, far from the coordinator's own ids."""

RangeDone = Callable[[list[Mutation] | None, int | None, BaseException | None], None]
"""``done(partitions, covered, error)``: ``covered`` is None when the whole range was read,
else the last token read (resume from ``(covered, right]``)."""
Piece = tuple[int, int, tuple[Host, ...]]
"""A range read's piece: ``(low, high]`` with ``low < high`` and its natural replicas."""


def split_range(left: int, right: int, ring_tokens: Sequence[int]) -> list[tuple[int, int]]:
    """``(left, right]`` (wrapping when ``left >= right``; ``(t, t]`` is the whole ring) as
    pieces ``(low, high]`` with ``low < high`` that do not wrap, cut at every ring token, in the
    order a scan from ``left`` meets them. MIN_TOKEN is never a key's token: ``(x, MIN]`` is read
    as ``(x, MAX]``."""
    if left < right:
        halves = [(left, right)]
    elif right == MIN_TOKEN:
        halves = [(left, MAX_TOKEN)]
    else:
        halves = [(left, MAX_TOKEN), (MIN_TOKEN, right)]
    tokens = sorted(set(ring_tokens))
    pieces: list[tuple[int, int]] = []
    for low, high in halves:
        if low >= high:
            continue
        cursor = low
        for token in tokens[bisect.bisect_right(tokens, low) :]:
            if token >= high:
                break
            pieces.append((cursor, token))
            cursor = token
        pieces.append((cursor, high))
    return pieces


def join_pieces(
    pieces: Sequence[tuple[int, int]], replicas_of: Callable[[int], Sequence[Host]]
) -> list[Piece]:
    """``pieces`` with their natural replicas, neighbours with the same replicas joined."""
    joined: list[Piece] = []
    for low, high in pieces:
        natural = tuple(replicas_of(high))
        if joined and joined[-1][1] == low and set(joined[-1][2]) == set(natural):
            joined[-1] = (joined[-1][0], high, joined[-1][2])
        else:
            joined.append((low, high, natural))
    return joined


def reconcile_range(
    answers: Sequence[_codec.RangeAnswer],
) -> tuple[list[Mutation], int | None]:
    """The replicas' partitions of one piece merged per key, in token order, and the last
    token they cover together (None: the whole piece).

    When an answer stopped short, only tokens before its last partition's token are kept (that
    replica may hold more partitions of the same token); if that keeps nothing, its last token
    is included (only identical tokens of different keys could then be missed)."""
    merged: dict[tuple[bytes, ...], Mutation] = {}
    cut: int | None = None
    for answer in answers:
        for partition in answer.partitions:
            key = tuple(partition.partition_key)
            known = merged.get(key)
            merged[key] = partition if known is None else merge_mutations(known, partition)
        if answer.more and answer.partitions:
            last = base_token(answer.partitions[-1])
            cut = last if cut is None else min(cut, last)
    ordered = sorted(merged.values(), key=lambda m: (base_token(m), tuple(m.partition_key)))
    if cut is None:
        return ordered, None
    kept = [m for m in ordered if base_token(m) < cut]
    if kept:
        return kept, cut - 1
    return [m for m in ordered if base_token(m) <= cut], cut


@dataclass(slots=True)
class RangeRead:
    """A range read in flight on the coordinator (see the module docstring)."""

    keyspace: str
    table: str
    consistency: ConsistencyLevel
    limit: int
    pieces: list[Piece]
    deadline_ms: int
    done: RangeDone
    index: int = 0
    collected: list[Mutation] = field(default_factory=list)
    request_id: int = 0
    contacts: tuple[Host, ...] = ()
    answers: dict[Host, _codec.RangeAnswer] = field(default_factory=dict)
    timer: TimerHandle | None = None


class RangeReads:
    """The range reads a node coordinates, and its replica side of RANGE_READ. Runs on the
    node's thread; store work goes through the node's ``offload``."""

    def __init__(self, parts: NodeParts) -> None:
        self._host = parts.host
        self._settings = parts.settings
        self._store = parts.store
        self._clock = parts.clock
        self._offload = parts.offload
        self._membership = parts.state.membership
        self._placement = parts.placement
        self._messenger = parts.messenger
        self._ranges: dict[int, RangeRead] = {}
        self._next_range_id = _RANGE_REQUEST_IDS

    def read_range(
        self,
        keyspace: str,
        table: str,
        left: int,
        right: int,
        consistency: ConsistencyLevel,
        limit: int,
        done: RangeDone,
    ) -> None:
        """Coordinate a read of at most ``limit`` raw partitions of ``(left, right]`` (wrapping
        when ``left >= right``), in token order; ``done(partitions, covered, error)``."""
        try:
            if limit < 1:
                raise ValueError(f"a range read wants at least one partition, got {limit}")
            pieces = join_pieces(
                split_range(left, right, self._membership.token_metadata.sorted_tokens),
                lambda token: self._placement.replicas_of(keyspace, token).natural,
            )
        except Exception as error:
            done(None, None, error)
            return
        deadline_ms = self._clock.now_ms() + self._settings.range_timeout_ms
        state = RangeRead(keyspace, table, consistency, limit, pieces, deadline_ms, done)
        self._next_range_piece(state)

    def _finish_range(
        self, state: RangeRead, covered: int | None, error: BaseException | None
    ) -> None:
        self._ranges.pop(state.request_id, None)
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        if error is not None:
            state.done(None, None, error)
        else:
            state.done(state.collected, covered, None)

    def _next_range_piece(self, state: RangeRead) -> None:
        if state.index >= len(state.pieces):
            self._finish_range(state, None, None)
            return
        low, high, natural = state.pieces[state.index]
        try:
            strategy = self._placement.strategy_of(state.keyspace)
            alive = assure_sufficient_live_replicas(
                state.consistency,
                strategy,
                natural,
                self._placement.live,
                local_dc=self._host.dc,
                for_write=False,
            )
            contacts = select_contacts(
                state.consistency, strategy, self._placement.read_proximity(alive), self._host.dc
            )
        except Exception as error:
            self._finish_range(state, None, error)
            return
        request_id = self._next_range_id
        self._next_range_id += 1
        state.request_id, state.contacts, state.answers = request_id, tuple(contacts), {}
        self._ranges[request_id] = state
        delay_ms = max(1, state.deadline_ms - self._clock.now_ms())
        state.timer = self._clock.call_later(delay_ms, lambda: self._range_timed_out(request_id))
        wanted = state.limit - len(state.collected)
        command = _codec.RangeCommand(state.keyspace, state.table, low, high, wanted)
        self._send_range_read(request_id, command, contacts)

    def _send_range_read(
        self, request_id: int, command: _codec.RangeCommand, contacts: Sequence[Host]
    ) -> None:
        payload = _codec.encode_range_read(command)
        for replica in sorted(contacts, key=lambda host: host == self._host):  # local last
            if replica == self._host:

                def served(answer: _codec.RangeAnswer | None, error: BaseException | None) -> None:
                    self.on_range_answer(request_id, self._host, None if error else answer)

                self._offload(lambda: self._serve_range(command), served)
            elif not self._messenger.send(replica.endpoint, Verb.RANGE_READ, request_id, payload):
                self.on_range_answer(request_id, replica, None)

    def _serve_range(self, command: _codec.RangeCommand) -> _codec.RangeAnswer:
        store = self._store
        limit = max(1, min(command.limit, store.limits.max_page_size_rows))
        page = store.scan_mutations(
            (command.keyspace, command.table), command.low, command.high, page_size=limit
        )
        return _codec.RangeAnswer(tuple(page.mutations), page.paging_state is not None)

    def on_range_answer(
        self, request_id: int, replica: Host, answer: _codec.RangeAnswer | None
    ) -> None:
        """``replica``'s answer to range read piece ``request_id`` (None: it failed)."""
        state = self._ranges.get(request_id)
        if state is None or replica not in state.contacts or replica in state.answers:
            return
        if answer is None:  # the contacts are exactly blockFor: one failure is fatal
            error = ReadFailure(
                state.consistency,
                len(state.answers),
                len(state.contacts),
                1,
                bool(state.answers),
            )
            self._finish_range(state, None, error)
            return
        state.answers[replica] = answer
        if len(state.answers) < len(state.contacts):
            return
        self._ranges.pop(request_id, None)
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        partitions, covered = reconcile_range(list(state.answers.values()))
        state.collected.extend(partitions)
        high = state.pieces[state.index][1]
        state.index += 1
        if covered is not None and covered != high:
            self._finish_range(state, covered, None)
        elif len(state.collected) >= state.limit and state.index < len(state.pieces):
            self._finish_range(state, high, None)
        else:
            self._next_range_piece(state)

    def _range_timed_out(self, request_id: int) -> None:
        state = self._ranges.get(request_id)
        if state is None:
            return
        state.timer = None
        error = ReadTimeout(
            state.consistency, len(state.answers), len(state.contacts), bool(state.answers)
        )
        self._finish_range(state, None, error)

    def on_range_read(self, source: str, request_id: int, payload: bytes) -> None:
        """A RANGE_READ from ``source``: an answer to one of our pieces, or a command to serve."""
        message = _codec.decode_range_message(payload)
        if isinstance(message, _codec.RangeAnswer):
            host = self._placement.host_at(source)
            if host is not None:
                self.on_range_answer(request_id, host, message)
            return
        command = message

        def done(answer: _codec.RangeAnswer | None, error: BaseException | None) -> None:
            if error is None and answer is not None:
                body = _codec.encode_range_answer(answer, RANGE_ANSWER_MAX_BYTES)
                if self._messenger.send(source, Verb.RANGE_READ, request_id, body):
                    return
                error = RuntimeError("the answer could not be sent")
            self._messenger.fail(
                source, request_id, Verb.RANGE_READ, f"{type(error).__name__}: {error}"
            )

        self._offload(lambda: self._serve_range(command), done)
