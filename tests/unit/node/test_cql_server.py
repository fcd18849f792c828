"""The asyncio CQL shell (``ringflow.cql._server``) with a fake backend, over real loopback sockets.

Proves the shell's own duties, independent of the executor: the handshake (OPTIONS with the
sharding options, STARTUP, REGISTER), dispatch to the single worker thread, answers on the right
stream ids, SCHEMA_CHANGE pushes to registered connections only, error mapping (our exceptions
keep their code, anything else is a counted ServerError), the connection limit, back-pressure of
the pending-statement bound, and graceful close. Fast: each test is well under a second.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import pytest

from ringflow.cql import (
    Authenticate,
    AuthResponse,
    AuthSuccess,
    Consistency,
    DecodedMessage,
    ErrorResponse,
    EventType,
    FrameDecoder,
    Options,
    Query,
    QueryParameters,
    Ready,
    Register,
    Response,
    SchemaChange,
    SchemaChangeEvent,
    SchemaChangeResult,
    SchemaChangeTarget,
    SchemaChangeType,
    SetKeyspaceResult,
    Startup,
    Supported,
    VoidResult,
    decode_message,
    encode_message,
)
from ringflow.cql._server import CqlServer, Handled, ServerLimits, Statement
from ringflow.errors import ConfigurationError, ErrorCode, InvalidRequest

TIMEOUT_S = 5.0


@dataclass
class FakeSession:
    keyspace: str | None = None


@dataclass
class FakeBackend:
    """Answers by statement text; records the worker thread and the order of execution."""

    gate: threading.Event = field(default_factory=threading.Event)
    executed: list[str] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.gate.set()

    def open_session(self) -> FakeSession:
        return FakeSession()

    def handle(self, session: FakeSession, statement: Statement) -> Response:
        assert isinstance(statement, Query)
        self.threads.add(threading.current_thread().name)
        text = statement.query
        if text == "WAIT":
            assert self.gate.wait(TIMEOUT_S)
        self.executed.append(text)
        if text.startswith("USE "):
            session.keyspace = text[4:]
            return SetKeyspaceResult(session.keyspace)
        if text == "KEYSPACE?":
            return ErrorResponse(ErrorCode.INVALID, f"keyspace={session.keyspace}")
        if text == "CREATE":
            change = SchemaChange(SchemaChangeType.CREATED, SchemaChangeTarget.KEYSPACE, "ks")
            return SchemaChangeResult(change)
        if text == "INVALID":
            raise InvalidRequest("no such thing")
        if text.startswith("BIG"):  # a large answer (60,000 bytes)
            return ErrorResponse(ErrorCode.INVALID, "x" * 60_000)
        if text == "BUG":
            raise ValueError("oops")
        if text.startswith("PENDING"):  # answered later, with no thread waiting (a write)
            return Handled(VoidResult(), pending=self.released.future(text))
        if text == "NESTED":  # work handed on (a statement offloaded, then its read pending)
            read: concurrent.futures.Future[Response | Handled] = concurrent.futures.Future()
            offloaded: concurrent.futures.Future[Response | Handled] = concurrent.futures.Future()
            offloaded.set_result(
                Handled(VoidResult(), warnings=("from the inner work",), pending=read)
            )
            threading.Timer(0.05, read.set_result, (SetKeyspaceResult("nested"),)).start()
            return Handled(VoidResult(), pending=offloaded)
        return VoidResult()

    released: Releases = field(default_factory=lambda: Releases())


class Releases:
    """The pending answers of ``PENDING n`` statements, each done once its text is added."""

    def __init__(self) -> None:
        self._futures: dict[str, concurrent.futures.Future[Response | Handled]] = {}
        self._lock = threading.Lock()

    def future(self, text: str) -> concurrent.futures.Future[Response | Handled]:
        with self._lock:
            return self._futures.setdefault(text, concurrent.futures.Future())

    def add(self, text: str) -> None:
        found = self.future(text)
        if not found.done():
            found.set_result(VoidResult())

    def update(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.add(text)


class Client:
    """A raw CQL v4 client built from ringflow's own codec."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder(expected_version=None)

    @classmethod
    async def connect(cls, port: int) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, request: object, stream_id: int) -> None:
        self.writer.write(encode_message(request, stream_id))  # type: ignore[arg-type]

    async def receive(self) -> DecodedMessage:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return decode_message(frame)
            data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT_S)
            if not data:
                raise ConnectionError("server closed the connection")
            self.decoder.feed(data)

    async def request(self, request: object, stream_id: int = 1) -> Response:
        self.send(request, stream_id)
        reply = await self.receive()
        assert reply.stream_id == stream_id
        return reply.message  # type: ignore[return-value]

    async def start(self) -> None:
        assert await self.request(Startup({"CQL_VERSION": "3.4.5"}), 0) == Ready()

    async def closed(self) -> bool:
        data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT_S)
        return data == b""

    def close(self) -> None:
        self.writer.close()


class SlowLogin:
    """Accepts any token, ``delay_s`` after it arrives (a password check on a busy node)."""

    authenticator_class = "org.apache.cassandra.auth.PasswordAuthenticator"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def authenticate(
        self, session: FakeSession, token: bytes | None
    ) -> concurrent.futures.Future[None] | None:
        time.sleep(self.delay_s)
        return None


def query(text: str) -> Query:
    return Query(text, QueryParameters(Consistency.ONE))


def run_with_server(
    body: Callable[[CqlServer[FakeSession], FakeBackend], Awaitable[None]],
    authenticator: SlowLogin | None = None,
    **limits: object,
) -> tuple[CqlServer[FakeSession], FakeBackend]:
    backend = FakeBackend()
    worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="storage")
    server = CqlServer(
        backend,
        worker,
        host="127.0.0.1",
        port=0,
        limits=ServerLimits(**limits),  # type: ignore[arg-type]
        shard_count=2,
        ignore_msb=12,
        authenticator=authenticator,
    )

    async def main() -> None:
        await server.start()
        try:
            await asyncio.wait_for(body(server, backend), TIMEOUT_S * 2)
        finally:
            backend.gate.set()
            await server.close()

    try:
        asyncio.run(main())
    finally:
        worker.shutdown(wait=True)
    return server, backend


def test_options_advertise_scylla_sharding_round_robin_over_connections() -> None:
    shards: list[str] = []

    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        for _ in range(3):
            client = await Client.connect(server.port)
            supported = await client.request(Options())
            assert isinstance(supported, Supported)
            assert supported.options["SCYLLA_NR_SHARDS"] == ("2",)
            assert supported.options["SCYLLA_SHARDING_IGNORE_MSB"] == ("12",)
            assert "SCYLLA_SHARD_AWARE_PORT" not in supported.options
            assert supported.options["COMPRESSION"] == ("lz4",)
            shards.append(supported.options["SCYLLA_SHARD"][0])
            client.close()

    run_with_server(body)
    assert shards == ["0", "1", "0"]


def test_statements_run_on_one_worker_thread_in_order_with_session_state() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        client = await Client.connect(server.port)
        await client.start()
        for stream_id, text in enumerate(["a", "b", "USE ks", "c"], start=1):
            client.send(query(text), stream_id)
        answers = {}
        for _ in range(4):
            reply = await client.receive()
            answers[reply.stream_id] = reply.message
        assert answers == {
            1: VoidResult(),
            2: VoidResult(),
            3: SetKeyspaceResult("ks"),
            4: VoidResult(),
        }
        error = await client.request(query("KEYSPACE?"), 9)
        assert error == ErrorResponse(ErrorCode.INVALID, "keyspace=ks")
        client.close()

    server, backend = run_with_server(body)
    assert backend.executed == ["a", "b", "USE ks", "c", "KEYSPACE?"]
    assert len(backend.threads) == 1 and next(iter(backend.threads)).startswith("storage")
    assert server.stats.server_errors == 0


def test_query_before_startup_is_a_protocol_error_and_the_connection_goes_on() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        client = await Client.connect(server.port)
        error = await client.request(query("a"), 3)
        assert isinstance(error, ErrorResponse) and error.code == ErrorCode.PROTOCOL_ERROR
        await client.start()
        assert await client.request(query("a"), 4) == VoidResult()
        client.close()

    _server, backend = run_with_server(body)
    assert backend.executed == ["a"]


def test_schema_change_is_pushed_only_to_registered_connections_after_the_answer() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        listener, bystander, actor = [await Client.connect(server.port) for _ in range(3)]
        for client in (listener, bystander, actor):
            await client.start()
        assert await listener.request(Register((EventType.SCHEMA_CHANGE,)), 5) == Ready()
        assert await bystander.request(Register((EventType.STATUS_CHANGE,)), 5) == Ready()
        answer = await actor.request(query("CREATE"), 7)
        assert isinstance(answer, SchemaChangeResult)
        pushed = await listener.receive()
        assert pushed.stream_id == -1
        assert pushed.message == SchemaChangeEvent(answer.change)
        # The bystander gets nothing: its next frame is the answer to its next request.
        assert await bystander.request(query("a"), 8) == VoidResult()
        for client in (listener, bystander, actor):
            client.close()

    server, _backend = run_with_server(body)
    assert server.stats.events_pushed == 1


def test_errors_keep_their_code_and_unexpected_exceptions_are_counted_server_errors() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        client = await Client.connect(server.port)
        await client.start()
        assert await client.request(query("INVALID"), 1) == ErrorResponse(
            ErrorCode.INVALID, "no such thing"
        )
        bug = await client.request(query("BUG"), 2)
        assert bug == ErrorResponse(ErrorCode.SERVER_ERROR, "ValueError: oops")
        assert await client.request(query("a"), 3) == VoidResult()
        client.close()

    server, _backend = run_with_server(body)
    assert server.stats.server_errors == 1


def test_connections_over_the_limit_get_overloaded_then_closed() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        first = await Client.connect(server.port)
        await first.start()
        second = await Client.connect(server.port)
        refusal = await second.request(Options(), 1)
        assert isinstance(refusal, ErrorResponse)
        assert refusal.code == ErrorCode.OVERLOADED and "limit 1" in refusal.message
        assert await second.closed()
        assert await first.request(query("a"), 2) == VoidResult()
        first.close()
        second.close()

    server, _backend = run_with_server(
        body, max_concurrent_connections=1, max_concurrent_connections_per_ip=1
    )
    assert server.stats.connections_refused == 1


def test_pending_bound_applies_back_pressure_and_answers_in_completion_order() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        backend.gate.clear()
        slow, fast = await Client.connect(server.port), await Client.connect(server.port)
        await slow.start()
        await fast.start()
        slow.send(query("WAIT"), 1)
        await asyncio.sleep(0.1)
        fast.send(query("after"), 2)
        await asyncio.sleep(0.2)
        assert backend.executed == [], "the second statement must wait for a pending slot"
        backend.gate.set()
        assert (await slow.receive()).message == VoidResult()
        assert (await fast.receive()).message == VoidResult()
        slow.close()
        fast.close()

    _server, backend = run_with_server(body, max_pending_requests=1)
    assert backend.executed == ["WAIT", "after"]


def test_statements_in_flight_bound_holds_the_others_before_they_start() -> None:
    """At most ``max_statements_in_flight`` statements between their start on the worker (a
    write's timestamp) and their answer; the others are not started until one is answered."""

    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        client = await Client.connect(server.port)
        await client.start()
        for stream_id in range(1, 6):
            client.send(query(f"PENDING {stream_id}"), stream_id)
        await asyncio.sleep(0.3)
        assert backend.executed == ["PENDING 1", "PENDING 2"]
        assert server.in_flight == 2
        backend.released.add("PENDING 2")
        assert (await client.receive()).stream_id == 2
        await asyncio.sleep(0.2)
        assert backend.executed == ["PENDING 1", "PENDING 2", "PENDING 3"]
        backend.released.update(f"PENDING {i}" for i in range(1, 6))
        answered = {(await client.receive()).stream_id for _ in range(4)}
        assert answered == {1, 3, 4, 5}
        assert server.in_flight == 0
        client.close()

    server, backend = run_with_server(body, max_statements_in_flight=2)
    assert server.most_in_flight == 2
    assert len(backend.executed) == 5


def test_a_client_that_does_not_read_its_answers_is_not_read_either() -> None:
    """Answers are written without waiting, but a connection whose answers pile up unread
    (its transport over the high-water mark) is not read, and has no more statements
    started, until its client reads them: of 1,000 requests of 10 KB, each answered with
    60 KB (60 MB in all), far from all are run while the client reads nothing; once it
    reads, every one is answered."""
    requests = 1_000
    padded = query("BIG" + " " * 10_000)

    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        client = await Client.connect(server.port)
        await client.start()
        for stream_id in range(1, requests + 1):
            client.send(padded, stream_id)
        await asyncio.sleep(1.0)
        assert 0 < len(backend.executed) < requests // 2
        answered = {(await client.receive()).stream_id for _ in range(requests)}
        assert answered == set(range(1, requests + 1))
        client.close()

    _server, backend = run_with_server(body)
    assert len(backend.executed) == requests


def test_pending_work_that_hands_on_more_work_is_awaited_to_its_end() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        client = await Client.connect(server.port)
        await client.start()
        client.send(query("NESTED"), 3)
        reply = await client.receive()
        assert reply.stream_id == 3
        assert reply.message == SetKeyspaceResult("nested")
        assert reply.warnings == ("from the inner work",)
        client.close()

    run_with_server(body)


def test_close_lets_statements_in_flight_finish() -> None:
    results: list[Response] = []

    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        backend.gate.clear()
        client = await Client.connect(server.port)
        await client.start()
        client.send(query("WAIT"), 1)
        await asyncio.sleep(0.1)
        closing = asyncio.create_task(server.close())
        await asyncio.sleep(0.1)
        backend.gate.set()
        results.append((await client.receive()).message)
        await closing
        assert await client.closed()

    run_with_server(body)
    assert results == [VoidResult()]


@pytest.mark.parametrize(
    "limits",
    [
        {"max_concurrent_connections": 0},
        {"max_pending_requests": -1},
        {"max_frame_size": 1.5},
        {"max_frame_size": 2**31},
        {"shutdown_grace_s": True},
    ],
)
def test_bad_limits_are_configuration_errors(limits: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(limits))):
        ServerLimits(**limits)  # type: ignore[arg-type]


# --- issue 16: answers that do not fit, shares, budgets, timeouts -----------------------------

LONG_TEXT = "x" * 70_000


@dataclass
class LongAnswers(FakeBackend):
    """Answers "LONG ERROR" with an error message, and "LONG CREATE" with a schema change,
    whose texts are over the 65,535-byte [string] limit."""

    def handle(self, session: FakeSession, statement: Statement) -> Response:
        assert isinstance(statement, Query)
        if statement.query == "LONG ERROR":
            return ErrorResponse(ErrorCode.INVALID, "no keyspace " + LONG_TEXT)
        if statement.query == "LONG CREATE":
            change = SchemaChange(SchemaChangeType.CREATED, SchemaChangeTarget.KEYSPACE, LONG_TEXT)
            return SchemaChangeResult(change)
        return super().handle(session, statement)


def test_answers_too_long_are_refitted_counted_and_the_connection_goes_on() -> None:
    backend = LongAnswers()
    worker = concurrent.futures.ThreadPoolExecutor(1)
    server = CqlServer(backend, worker, host="127.0.0.1", port=0)

    async def main() -> None:
        await server.start()
        try:
            client, listener = await Client.connect(server.port), await Client.connect(server.port)
            await client.start()
            await listener.start()
            assert await listener.request(Register((EventType.SCHEMA_CHANGE,)), 2) == Ready()
            error = await client.request(query("LONG ERROR"), 1)
            assert isinstance(error, ErrorResponse) and error.code == ErrorCode.INVALID
            assert error.message.startswith("no keyspace xxx") and "[truncated " in error.message
            invalid = await client.request(query("LONG CREATE"), 2)
            assert isinstance(invalid, ErrorResponse) and invalid.code == ErrorCode.INVALID
            assert await client.request(query("a"), 3) == VoidResult()
            assert await listener.request(query("a"), 4) == VoidResult(), "no push came first"
            client.close()
            listener.close()
        finally:
            await server.close()

    try:
        asyncio.run(main())
    finally:
        worker.shutdown(wait=True)
    assert server.stats.refitted_answers == 2
    assert server.stats.connection_failures == 0


async def connect_from(port: int, source: str) -> Client:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    return Client(reader, writer)


def test_each_client_address_gets_its_share_of_connections() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        greedy = [await connect_from(server.port, "127.0.0.2") for _ in range(2)]
        for client in greedy:
            await client.start()
        refused = await connect_from(server.port, "127.0.0.2")
        refusal = await refused.request(Options(), 1)
        assert isinstance(refusal, ErrorResponse) and refusal.code == ErrorCode.OVERLOADED
        assert "from 127.0.0.2" in refusal.message and "per_ip" in refusal.message
        assert await refused.closed()
        other = await connect_from(server.port, "127.0.0.3")
        await other.start()
        assert await other.request(query("a"), 2) == VoidResult()
        for client in [*greedy, refused, other]:
            client.close()

    server, _backend = run_with_server(
        body, max_concurrent_connections=4, max_concurrent_connections_per_ip=2
    )
    assert server.stats.connections_refused == 1


def test_a_full_request_budget_pauses_reading_until_answers_release_it() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        backend.gate.clear()
        client = await Client.connect(server.port)
        await client.start()
        client.send(query("WAIT"), 1)
        client.send(query("big " + "y" * 1500), 2)  # queued behind WAIT, its bytes held
        await asyncio.sleep(0.1)
        client.send(query("big " + "z" * 1500), 3)  # does not fit beside them: not read
        await asyncio.sleep(0.2)
        assert backend.executed == []
        assert server.stats.reads_paused == 1
        assert server.budget.total <= 2200
        backend.gate.set()
        answers = {(await client.receive()).stream_id for _ in range(3)}
        assert answers == {1, 2, 3}
        client.close()

    server, backend = run_with_server(
        body,
        max_frame_size=2100,
        max_request_data_in_flight=2200,
        max_request_data_in_flight_per_ip=2200,
    )
    assert [text[:5] for text in backend.executed] == ["WAIT", "big y", "big z"]
    assert server.budget.total == 0


def test_a_connection_logged_in_while_its_read_waited_is_not_closed_for_a_startup_timeout() -> None:
    """The login is answered from the login worker while the read loop already waits for the
    client's next bytes with the startup timeout; the client then stays idle past it, as a
    driver's pool does between requests (a demo run's first PREPARE found all three edge
    connections closed: 'startup timeout' on connections that were READY)."""

    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        client = await Client.connect(server.port)
        authenticate = await client.request(Startup({"CQL_VERSION": "3.4.5"}), 0)
        assert isinstance(authenticate, Authenticate)
        assert await client.request(AuthResponse(b"\x00cassandra\x00cassandra"), 1) == (
            AuthSuccess(None)
        )
        await asyncio.sleep(1.6)  # idle past the startup timeout, counted from AUTH_RESPONSE
        assert await client.request(query("a"), 2) == VoidResult()
        never = await Client.connect(server.port)  # no STARTUP: still closed
        assert await never.closed()
        client.close()
        never.close()

    server, backend = run_with_server(body, SlowLogin(0.2), startup_timeout_s=1.0)
    assert backend.executed == ["a"]
    assert server.stats.connections_timed_out == 1


def test_idle_connections_and_stalled_frames_are_closed() -> None:
    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        idle, stalled = await Client.connect(server.port), await Client.connect(server.port)
        await idle.start()
        await stalled.start()
        frame = encode_message(query("a"), 5)
        stalled.writer.write(frame[:-3])
        assert await idle.closed()
        assert await stalled.closed()
        idle.close()
        stalled.close()

    server, backend = run_with_server(body, idle_timeout_s=0.3, frame_body_timeout_s=0.3)
    assert server.stats.connections_timed_out == 2
    assert backend.executed == []


@pytest.mark.parametrize("large", [False, True], ids=["small-frame", "large-frame"])
def test_throw_on_overload_answers_overloaded_skips_the_body_and_goes_on(large: bool) -> None:
    """A frame whose header arrives while the budget is full is answered at once; (a frame
    that arrives whole in one read is already in memory: it is served, and reading pauses)."""
    padding = 2 * 1024 * 1024 if large else 1500  # large: a body gathered apart (>= 1 MiB)
    budget = padding + 700

    async def body(server: CqlServer[FakeSession], backend: FakeBackend) -> None:
        backend.gate.clear()
        client = await Client.connect(server.port)
        await client.start()
        client.send(query("WAIT"), 1)
        client.send(query("big " + "y" * padding), 2)  # held behind WAIT
        await asyncio.sleep(0.1)
        refused = encode_message(query("big " + "z" * padding), 3)
        client.writer.write(refused[:20])  # its header: over the budget, so refused
        await asyncio.sleep(0.1)
        client.writer.write(refused[20:])  # the body is skipped as it arrives
        client.send(query("after"), 4)
        refusal = await client.receive()
        assert refusal.stream_id == 3
        assert isinstance(refusal.message, ErrorResponse)
        assert refusal.message.code == ErrorCode.OVERLOADED
        assert "native_transport_max_request_data_in_flight" in refusal.message.message
        backend.gate.set()
        answers = {(await client.receive()).stream_id for _ in range(3)}
        assert answers == {1, 2, 4}
        client.close()

    server, backend = run_with_server(
        body,
        max_frame_size=budget - 100,
        max_request_data_in_flight=budget,
        max_request_data_in_flight_per_ip=budget,
        throw_on_overload=True,
    )
    assert [text[:5] for text in backend.executed] == ["WAIT", "big y", "after"]
    assert server.stats.frames_overloaded == 1 and server.stats.reads_paused == 0
    assert server.budget.total == 0
