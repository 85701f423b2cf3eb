"""redis-py, as applications configure it, against a real sluiced.

The matrix: redis-py's two reply parsers (hiredis, which redis-py uses by
default when it is installed, and its pure-Python RESP3 parser, its default
without hiredis), each sync and asyncio. Every client keeps redis-py's
defaults (RESP3: HELLO 3 on connecting, CLIENT SETINFO, the connection pool)
and runs RL.REDUCE with options, CL.THROTTLE, a default pipeline (a
MULTI/EXEC transaction) and a ``transaction=False`` pipeline; every reply
is checked.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio
from redis._parsers import _AsyncHiredisParser, _AsyncRESP3Parser, _HiredisParser, _RESP3Parser
from redis.utils import HIREDIS_AVAILABLE

PARSERS = ["hiredis", "python"]


def make_client(name: str, path: str, asynchronous: bool) -> Any:
    """A client with redis-py's defaults. hiredis is redis-py's parser once it
    is installed; for the pure-Python run, the pool's connections get the
    parser redis-py picks without hiredis (the connections' parser_class
    option), every other default unchanged."""
    if not HIREDIS_AVAILABLE:
        pytest.fail("hiredis is not installed: make setup installs it into .venv (requirements-test.txt)")
    r = (redis.asyncio.Redis if asynchronous else redis.Redis)(unix_socket_path=path)
    if name == "python":
        r.connection_pool.connection_kwargs["parser_class"] = _AsyncRESP3Parser if asynchronous else _RESP3Parser
    return r


def expected_parser(name: str, asynchronous: bool) -> type:
    if name == "hiredis":
        return _AsyncHiredisParser if asynchronous else _HiredisParser
    return _AsyncRESP3Parser if asynchronous else _RESP3Parser


# CL.THROTTLE t 2 1 60 four times: 3 tokens, one every 60 s; the fourth is limited.
THROTTLED = [[0, 3, 2, -1, 60], [0, 3, 1, -1, 120], [0, 3, 0, -1, 180], [1, 3, 0, 60, 180]]


@pytest.mark.parametrize("parser", PARSERS)
def test_sync(resp_socket: str, parser: str) -> None:
    r = make_client(parser, resp_socket, False)
    try:
        assert r.ping() is True
        conn = r.connection_pool.get_connection()
        try:
            assert type(conn._parser) is expected_parser(parser, False)
            info = conn.handshake_metadata
            assert info[b"proto"] == 3 and info[b"server"] == b"sluice", info
        finally:
            r.connection_pool.release(conn)
        client = r.client_info()
        assert client["resp"] == "3" and client["lib-name"] == "redis-py", client

        assert r.execute_command("RL.REDUCE", "k", 10, 60, "TAKE", 3, "REFILL", 5) == 10
        assert r.execute_command("RL.REDUCE", "k", 10, 60, "TAKE", 3, "REFILL", 5) == 7
        assert r.execute_command("RL.GET", "k", 10, 60, "REFILL", 5) == 4
        assert r.execute_command("RL.PREDUCE", "p", 2, 60000, "STRICT") == 2
        assert r.execute_command("CL.THROTTLE", "c", 4, 1, 60) == [0, 5, 4, -1, 60]
        assert r.execute_command("CL.THROTTLE", "c", 4, 1, 60, 0) == [0, 5, 4, -1, 60]

        for transaction, key in ((True, "tx"), (False, "plain")):
            with r.pipeline(transaction=transaction) as p:
                for _ in range(4):
                    p.execute_command("CL.THROTTLE", key, 2, 1, 60)
                p.execute_command("RL.REDUCE", key, 5, 60, "TAKE", 2)
                p.execute_command("RL.REDUCE", key, 5, 60, "TAKE", 2)
                assert p.execute() == THROTTLED + [5, 3], transaction

        # A rate limit refused while running does not undo the others: it is
        # reported in its place, as Redis does.
        with r.pipeline() as p:
            p.execute_command("CL.THROTTLE", "e", 1, 1, 60)
            p.execute_command("RL.REDUCE", "e", "x", 60)
            p.execute_command("CL.THROTTLE", "e", 1, 1, 60)
            got = p.execute(raise_on_error=False)
        assert got[0] == [0, 2, 1, -1, 60] and got[2] == [0, 2, 0, -1, 120], got
        assert isinstance(got[1], redis.ResponseError) and str(got[1]) == "Value is not an integer or out of range"

        with r.pipeline() as p:
            with pytest.raises(redis.ResponseError, match="WATCH is not supported"):
                p.watch("k")
        assert r.dbsize() == 8  # k, p, c, e, and tx and plain under both algorithms
        assert r.config_get("save") == {"save": ""}
    finally:
        r.close()


@pytest.mark.parametrize("parser", PARSERS)
def test_asyncio(resp_socket: str, parser: str) -> None:
    async def run() -> None:
        r = make_client(parser, resp_socket, True)
        try:
            assert await r.ping() is True
            conn = await r.connection_pool.get_connection()
            try:
                assert type(conn._parser) is expected_parser(parser, True)
            finally:
                await r.connection_pool.release(conn)
            client = await r.client_info()
            assert client["resp"] == "3" and client["lib-name"] == "redis-py", client

            assert await r.execute_command("RL.REDUCE", "k", 10, 60, "TAKE", 3, "REFILL", 5) == 10
            assert await r.execute_command("RL.GET", "k", 10, 60, "REFILL", 5) == 7
            assert await r.execute_command("CL.THROTTLE", "c", 4, 1, 60) == [0, 5, 4, -1, 60]

            for transaction, key in ((True, "tx"), (False, "plain")):
                async with r.pipeline(transaction=transaction) as p:
                    for _ in range(4):
                        p.execute_command("CL.THROTTLE", key, 2, 1, 60)
                    p.execute_command("RL.REDUCE", key, 5, 60, "TAKE", 2)
                    p.execute_command("RL.REDUCE", key, 5, 60, "TAKE", 2)
                    assert await p.execute() == THROTTLED + [5, 3], transaction

            # Concurrent callers share the pool: every token is counted once.
            async def one() -> int:
                return await r.execute_command("RL.REDUCE", "shared", 1000, 3600)

            got = await asyncio.gather(*(one() for _ in range(100)))
            assert sorted(got) == list(range(901, 1001))
            assert await r.execute_command("RL.GET", "shared", 1000, 3600) == 900
        finally:
            await r.aclose()

    asyncio.run(run())


def test_global_routes(routed_pair: tuple[str, str]) -> None:
    """CL.THROTTLE and RL.REDUCE on keys a global route matches share one
    budget across two sidecars, through redis-py's default client; keys of
    a local route keep a budget per sidecar."""
    a, b = (redis.Redis(unix_socket_path=s) for s in routed_pair)
    try:
        for i in range(12):
            assert (a, b)[i % 2].execute_command("RL.REDUCE", "login:alice", 10, 3600) == max(10 - i, 0)
        for i in range(7):
            limited, limit, remaining, _, _ = (a, b)[i % 2].execute_command("CL.THROTTLE", "api:x", 4, 1, 3600)
            assert (limited, limit, remaining) == (int(i >= 5), 5, max(4 - i, 0))
        for c in (a, b):
            assert [c.execute_command("RL.REDUCE", "test:1", 2, 3600) for _ in range(3)] == [2, 1, 0]
        with pytest.raises(redis.ResponseError, match="AT is not accepted"):
            a.execute_command("RL.REDUCE", "login:bob", 10, 60, "AT", 1700000000)
    finally:
        a.close()
        b.close()
