"""The loopback RPC between the replica coordinator and its sources' planner processes
(``pipeline._replica_rpc``): answers come back in order, a handler's failure comes back as a
typed error, a client without the token gets nothing, connections past the bound are closed,
and the token never shows in a client's error."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from ringflow.pipeline._replica_offsets import CoordinatorError
from ringflow.pipeline._replica_rpc import RpcClient, RpcServer, new_token


def handler(method: str, params: Mapping[str, Any]) -> Any:
    if method == "echo":
        return dict(params)
    raise CoordinatorError(f"unknown method {method!r}")


def test_calls_are_answered_and_failures_come_back_typed() -> None:
    token = new_token()
    server = RpcServer(handler, token).start()
    try:
        client = RpcClient(server.address, token)
        assert client.call("echo", channel="hub", n=1) == {"channel": "hub", "n": 1}
        assert client.call("echo", n=2) == {"n": 2}
        with pytest.raises(CoordinatorError, match="unknown method 'nope'"):
            client.call("nope")
        assert client.call("echo", n=3) == {"n": 3}  # the connection is still good
        client.close()
    finally:
        server.stop()


def test_a_client_without_the_token_gets_nothing_and_never_sees_it() -> None:
    token = new_token()
    server = RpcServer(handler, token).start()
    try:
        with pytest.raises(CoordinatorError) as caught:
            RpcClient(server.address, new_token()).call("echo", n=1)
        assert token not in str(caught.value)
        assert RpcClient(server.address, token).call("echo", n=1) == {"n": 1}
    finally:
        server.stop()


def test_connections_past_the_bound_are_closed_and_the_others_served() -> None:
    token = new_token()
    server = RpcServer(handler, token, max_connections=2).start()
    try:
        first, second = RpcClient(server.address, token), RpcClient(server.address, token)
        assert first.call("echo", n=1) == second.call("echo", n=1) == {"n": 1}
        third = RpcClient(server.address, token, timeout_s=5)
        with pytest.raises(CoordinatorError):
            third.call("echo", n=1)
        first.close()
        answered = threading.Event()

        def retry() -> None:  # the freed slot serves a new client
            for _ in range(50):
                try:
                    if RpcClient(server.address, token).call("echo", n=4) == {"n": 4}:
                        answered.set()
                        return
                except CoordinatorError:
                    threading.Event().wait(0.1)

        worker = threading.Thread(target=retry)
        worker.start()
        worker.join(30)
        assert answered.is_set()
    finally:
        server.stop()


def test_a_malformed_address_is_refused() -> None:
    with pytest.raises(CoordinatorError):
        RpcClient("no-port", new_token())
