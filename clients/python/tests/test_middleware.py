"""WSGI and ASGI middleware, called directly with fake environs and scopes, and the header helpers."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from conftest import Sidecar

from sluice import GCRA, AsyncClient, Client, Concurrency, InvalidLimit, SlidingWindow, TokenBucket
from sluice.asgi import RateLimitMiddleware as ASGIMiddleware
from sluice.wsgi import RateLimitMiddleware as WSGIMiddleware

LIMIT = TokenBucket(max=2, refill_time=3600)  # not a fixed window: no boundary to straddle


def wsgi_app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello " + environ["REMOTE_ADDR"].encode()]


def call_wsgi(app: Any, addr: str, path: str = "/") -> Tuple[str, Dict[str, str], bytes]:
    got: Dict[str, Any] = {}

    def start_response(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        got["status"], got["headers"] = status, headers
        return lambda data: None

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": addr, "wsgi.url_scheme": "http"}
    body = b"".join(app(environ, start_response))
    headers = {k.lower(): v for k, v in got["headers"]}
    assert len(headers) == len(got["headers"]), "a header was sent twice"
    return got["status"], headers, body


def key(environ: Dict[str, Any]) -> Optional[str]:
    if environ["PATH_INFO"] == "/health":
        return None
    return "ip:" + environ["REMOTE_ADDR"]


def test_wsgi(sidecar: Sidecar) -> None:
    client = Client(sidecar.socket, on_unavailable="raise")
    app = WSGIMiddleware(wsgi_app, client, LIMIT, key=key, name="per-ip")
    status, headers, body = call_wsgi(app, "10.0.0.1")
    assert status == "200 OK" and body == b"hello 10.0.0.1"
    assert headers["ratelimit-policy"] == '"per-ip";q=2;w=3600'
    assert headers["ratelimit"].startswith('"per-ip";r=1;t=') and "retry-after" not in headers
    t = int(headers["ratelimit"].rsplit("=", 1)[1])
    assert 0 < t <= 3600
    assert call_wsgi(app, "10.0.0.1")[0] == "200 OK"
    status, headers, body = call_wsgi(app, "10.0.0.1")
    assert status == "429 Too Many Requests" and body == b"Too Many Requests\n"
    assert headers["retry-after"] == str(t) or abs(int(headers["retry-after"]) - t) <= 1
    assert headers["ratelimit"] == f'"per-ip";r=0;t={headers["retry-after"]}'
    assert headers["content-length"] == str(len(body))
    assert call_wsgi(app, "10.0.0.2")[0] == "200 OK"  # another key
    for _ in range(3):
        assert call_wsgi(app, "10.0.0.1", "/health")[0] == "200 OK"  # not limited
    plain = WSGIMiddleware(wsgi_app, client, "fixed_window:limit=5,window=1h", key=key, headers=False)
    assert "ratelimit" not in call_wsgi(plain, "10.0.0.3")[1]
    with pytest.raises(ValueError):
        WSGIMiddleware(wsgi_app, client, LIMIT, key=key, name="caf\u00e9")
    client.close()


def test_wsgi_keeps_the_apps_own_headers(sidecar: Sidecar) -> None:
    def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [("RateLimit", "mine")])
        return [b""]
    with Client(sidecar.socket) as client:
        _, headers, _ = call_wsgi(WSGIMiddleware(app, client, LIMIT, key=key), "10.0.0.9")
    assert headers["ratelimit"] == "mine" and "ratelimit-policy" in headers


def test_wsgi_when_the_sidecar_is_down(sidecar: Sidecar) -> None:
    # An outage of a sidecar that answered the clients' start checks: the policy decides.
    for_open = WSGIMiddleware(wsgi_app, Client(sidecar.socket, on_unavailable="open"), LIMIT, key=key)
    for_closed = WSGIMiddleware(wsgi_app, Client(sidecar.socket, on_unavailable="closed"), LIMIT, key=key)
    sidecar.stop()
    status, headers, _ = call_wsgi(for_open, "1.2.3.4")
    assert status == "200 OK" and "ratelimit" not in headers
    status, headers, _ = call_wsgi(for_closed, "1.2.3.4")
    assert status.startswith("429") and "retry-after" not in headers and "ratelimit" not in headers


async def asgi_app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


async def call_asgi(app: Any, addr: str, kind: str = "http") -> Tuple[int, Dict[bytes, bytes], bytes]:
    sent: List[Dict[str, Any]] = []

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": kind, "method": "GET", "path": "/", "headers": [], "client": (addr, 5000)}
    await app(scope, receive, send)
    start, body = sent[0], sent[1]
    assert start["type"] == "http.response.start" and body["type"] == "http.response.body"
    return start["status"], dict(start["headers"]), body["body"]


def scope_key(scope: Dict[str, Any]) -> str:
    return "ip:" + scope["client"][0]


def test_asgi(sidecar: Sidecar) -> None:
    async def main() -> None:
        client = AsyncClient(sidecar.socket, on_unavailable="raise")
        app = ASGIMiddleware(asgi_app, client, GCRA(burst=1, count=1, period=60), key=scope_key)
        status, headers, body = await call_asgi(app, "10.0.0.1")
        assert status == 200 and body == b"hello" and headers[b"content-type"] == b"text/plain"
        assert headers[b"ratelimit-policy"] == b'"default";q=2;w=120'
        assert headers[b"ratelimit"] == b'"default";r=1;t=60'
        assert (await call_asgi(app, "10.0.0.1"))[0] == 200
        status, headers, body = await call_asgi(app, "10.0.0.1")
        assert status == 429 and body == b"Too Many Requests\n"
        assert headers[b"retry-after"] in (b"59", b"60") and headers[b"ratelimit"].startswith(b'"default";r=0;t=')
        await client.close()

        async def async_key(scope: Dict[str, Any]) -> Optional[str]:
            return None if scope["client"][0] == "127.0.0.1" else scope_key(scope)
        with Client(sidecar.socket) as sync:  # a sync client works too
            app2 = ASGIMiddleware(asgi_app, sync, SlidingWindow(1, 60), key=async_key)
            assert [(await call_asgi(app2, "10.0.0.5"))[0] for _ in range(2)] == [200, 429]
            assert [(await call_asgi(app2, "127.0.0.1"))[0] for _ in range(2)] == [200, 200]
    asyncio.run(main())


def test_asgi_passes_other_scopes() -> None:
    app = ASGIMiddleware(asgi_app, AsyncClient("/nonexistent", lazy=True), LIMIT, key=scope_key)
    assert asyncio.run(call_asgi(app, "1.2.3.4", kind="websocket"))[0] == 200  # never asked the (absent) sidecar


def test_wsgi_shadow(sidecar: Sidecar, caplog: Any) -> None:
    client = Client(sidecar.socket, on_unavailable="raise")
    one = GCRA(0, 1, 3600)
    app = WSGIMiddleware(wsgi_app, client, one, key=key, shadow=True)
    for _ in range(3):  # the limit would deny the 2nd and 3rd: they go through, logged
        assert call_wsgi(app, "10.0.0.7")[0] == "200 OK"
    assert sum("shadow-denied" in r.getMessage() for r in caplog.records) == 2
    # A limit whose spec says shadow=true does the same without shadow=True.
    spec = WSGIMiddleware(wsgi_app, client, "gcra:burst=0,count=1,period=1h,shadow=true", key=key)
    assert [call_wsgi(spec, "10.0.0.9")[0] for _ in range(2)] == ["200 OK", "200 OK"]
    assert sum("shadow-denied" in r.getMessage() for r in caplog.records) == 3

    def ban(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("202 Accepted", [("Content-Type", "text/plain")])
        return [b"queued"]

    banned = WSGIMiddleware(wsgi_app, client, one, key=key, shadow=True, shadow_ban=ban)
    assert call_wsgi(banned, "10.0.0.8")[0] == "200 OK"
    status, _, body = call_wsgi(banned, "10.0.0.8")
    assert status == "202 Accepted" and body == b"queued"  # answered without the app


def test_asgi_shadow(sidecar: Sidecar) -> None:
    async def main() -> None:
        client = AsyncClient(sidecar.socket, on_unavailable="raise")
        sent: List[Dict[str, Any]] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"done"})

        async def ban(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b"queued"})

        async def send(message: Dict[str, Any]) -> None:
            sent.append(message)

        mw = ASGIMiddleware(app, client, GCRA(0, 1, 3600), key=lambda scope: "ip:x", shadow=True, shadow_ban=ban)
        scope = {"type": "http", "method": "GET", "path": "/"}
        await mw(scope, None, send)
        await mw(scope, None, send)
        statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
        assert statuses == [200, 202]
        await client.close()

    asyncio.run(main())


# ---- concurrency limits: a slot held while the request runs ------------------

TWO = Concurrency(limit=2, lease="1m")


def serve_wsgi(app: Any, environ: Dict[str, Any]) -> Tuple[str, Dict[str, str], bytes]:
    """Call a WSGI app as a server does: iterate the response, then close it."""
    got: Dict[str, Any] = {}

    def start_response(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        got["status"], got["headers"] = status, headers
        return lambda data: None

    env = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "10.1.0.1", "wsgi.url_scheme": "http"}
    env.update(environ)
    result = app(env, start_response)
    try:
        body = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    return got["status"], {k.lower(): v for k, v in got["headers"]}, body


def blocking_app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
    """Says it is running (``test.entered``), then waits for ``test.gate``, when the environ has them."""
    if "test.gate" in environ:
        environ["test.entered"].set()
        assert environ["test.gate"].wait(10), "the test never opened the gate"
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"done"]


class Blocked:
    """A request in a thread of its own, running ``blocking_app`` until ``finish``."""

    def __init__(self, app: Any) -> None:
        self.entered, self.gate = threading.Event(), threading.Event()
        self.result: Optional[Tuple[str, Dict[str, str], bytes]] = None
        self.thread = threading.Thread(target=self._run, args=(app,))
        self.thread.start()

    def _run(self, app: Any) -> None:
        self.result = serve_wsgi(app, {"test.gate": self.gate, "test.entered": self.entered})

    def finish(self) -> Tuple[str, Dict[str, str], bytes]:
        self.gate.set()
        self.thread.join(10)
        assert self.result is not None
        return self.result


def test_wsgi_concurrency(sidecar: Sidecar) -> None:
    with Client(sidecar.socket, on_unavailable="raise") as client:
        app = WSGIMiddleware(blocking_app, client, None, key=lambda environ: "conc", concurrency=TWO)
        a = Blocked(app)
        b = Blocked(app)
        try:
            assert a.entered.wait(10) and b.entered.wait(10)  # two requests running, each holding a slot
            assert client.peek("conc", TWO).remaining == 0
            status, headers, body = serve_wsgi(app, {})  # the third is denied
            assert status == "429 Too Many Requests" and body == b"Too Many Requests\n"
            assert headers["content-length"] == str(len(body)) and headers["content-type"].startswith("text/plain")
            # The concurrency limit's own fields, in concurrent requests; no Retry-After.
            assert "retry-after" not in headers and headers["ratelimit"] == '"default";r=0'
            assert headers["ratelimit-policy"] == '"default";q=2;qu="concurrent-requests"'
            assert a.finish()[0] == "200 OK"
            assert client.peek("conc", TWO).remaining == 1  # released when the response was done
            assert serve_wsgi(app, {})[0] == "200 OK"  # another is admitted
        finally:
            a.finish()
            b.finish()
        assert b.result is not None and b.result[0] == "200 OK"
        assert client.peek("conc", TWO).remaining == 2


def test_wsgi_concurrency_released_when_the_app_raises(sidecar: Sidecar) -> None:
    def failing(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        raise RuntimeError("boom")

    def failing_later(environ: Dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        yield b"part"
        raise RuntimeError("boom, streaming")

    with Client(sidecar.socket, on_unavailable="raise") as client:
        for app in (failing, failing_later):
            mw = WSGIMiddleware(app, client, None, key=lambda environ: "conc", concurrency=TWO)
            for _ in range(3):  # more often than there are slots: each one was released
                with pytest.raises(RuntimeError, match="boom"):
                    serve_wsgi(mw, {})
                assert client.peek("conc", TWO).remaining == 2


def test_wsgi_concurrency_streaming_holds_the_slot_until_closed(sidecar: Sidecar) -> None:
    closed: List[str] = []

    def streaming(environ: Dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            for i in range(1000):
                yield b"chunk %d\n" % i
        finally:
            closed.append(environ["PATH_INFO"])

    def start_response(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        return lambda data: None

    def environ(path: str) -> Dict[str, Any]:
        return {"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": "10.1.0.2"}

    with Client(sidecar.socket, on_unavailable="raise") as client:
        app = WSGIMiddleware(streaming, client, None, key=lambda environ: "stream", concurrency=TWO)
        one, two = app(environ("/1"), start_response), app(environ("/2"), start_response)
        assert next(iter(one)) == b"chunk 0\n" and next(iter(two)) == b"chunk 0\n"
        assert next(iter(one)) == b"chunk 1\n"
        assert client.peek("stream", TWO).remaining == 0  # both still streaming
        assert serve_wsgi(app, {"PATH_INFO": "/3"})[0] == "429 Too Many Requests"
        one.close()  # the client went away: the server closes the response before its end
        assert closed == ["/1"]  # the app's own close ran
        assert client.peek("stream", TWO).remaining == 1
        status, _, body = serve_wsgi(app, {"PATH_INFO": "/4"})
        assert status == "200 OK" and body.endswith(b"chunk 999\n")
        assert b"".join(two).startswith(b"chunk 1\n")  # exhausted: released before the server closes it
        assert client.peek("stream", TWO).remaining == 2
        two.close()
        two.close()  # released once only
        assert closed == ["/1", "/4", "/2"] and client.peek("stream", TWO).remaining == 2


def test_wsgi_concurrency_with_a_rate_limit(sidecar: Sidecar) -> None:
    with Client(sidecar.socket, on_unavailable="raise") as client:
        one = Concurrency(1, "1m")
        app = WSGIMiddleware(blocking_app, client, LIMIT, key=key, name="per-ip", concurrency=one,
                             concurrency_key=lambda environ: None if environ["PATH_INFO"] == "/free" else "all")
        held = client.lease("all", one)
        status, headers, _ = serve_wsgi(app, {"REMOTE_ADDR": "10.2.0.1"})  # rate limit allows, no slot
        assert status == "429 Too Many Requests" and "retry-after" not in headers
        assert headers["ratelimit"].startswith('"per-ip";r=1;')  # the rate limit's headers, as for an allowed one
        assert serve_wsgi(app, {"REMOTE_ADDR": "10.2.0.1", "PATH_INFO": "/free"})[0] == "200 OK"  # no slot needed
        status, headers, _ = serve_wsgi(app, {"REMOTE_ADDR": "10.2.0.1"})  # the rate limit denies first
        assert status == "429 Too Many Requests" and "retry-after" in headers
        assert client.release("all", one, held)
        status, headers, _ = serve_wsgi(app, {"REMOTE_ADDR": "10.2.0.2"})
        assert status == "200 OK" and headers["ratelimit"].startswith('"per-ip";r=1;')
        assert client.peek("all", one).remaining == 1
        quiet = WSGIMiddleware(blocking_app, client, LIMIT, key=key, headers=False, concurrency=one,
                               concurrency_key=lambda environ: "all")
        held = client.lease("all", one)
        status, headers, _ = serve_wsgi(quiet, {"REMOTE_ADDR": "10.2.0.3"})
        assert status.startswith("429") and "ratelimit" not in headers


def test_wsgi_concurrency_shadow(sidecar: Sidecar, caplog: Any) -> None:
    one = Concurrency(1, "1m")

    def ban(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("202 Accepted", [])
        return [b"queued"]

    with Client(sidecar.socket, on_unavailable="raise") as client:
        app = WSGIMiddleware(blocking_app, client, None, key=lambda environ: "sh", concurrency=one, shadow=True)
        assert serve_wsgi(app, {})[0] == "200 OK"  # allowed: holds the slot, released
        held = client.lease("sh", one)
        assert serve_wsgi(app, {})[0] == "200 OK"  # would be denied: let through without a slot
        assert [r.getMessage() for r in caplog.records if "shadow-denied" in r.getMessage()] == [
            "concurrency limit concurrency:limit=1,lease=1m0s shadow-denied a request for 'sh'"]
        banned = WSGIMiddleware(blocking_app, client, None, key=lambda environ: "sh", concurrency=one,
                                shadow=True, shadow_ban=ban)
        assert serve_wsgi(banned, {})[:3:2] == ("202 Accepted", b"queued")
        assert client.release("sh", one, held) and client.peek("sh", one).remaining == 1


def test_wsgi_concurrency_when_the_sidecar_is_down(sidecar: Sidecar) -> None:
    for_open = WSGIMiddleware(blocking_app, Client(sidecar.socket, on_unavailable="open"), None,
                              key=lambda environ: "k", concurrency=TWO)
    for_closed = WSGIMiddleware(blocking_app, Client(sidecar.socket, on_unavailable="closed"), None,
                                key=lambda environ: "k", concurrency=TWO, shadow=True)
    sidecar.stop()
    for _ in range(3):
        assert serve_wsgi(for_open, {})[0] == "200 OK"  # a degraded lease: nothing held, nothing released
    status, headers, _ = serve_wsgi(for_closed, {})
    assert status.startswith("429") and "retry-after" not in headers


def test_middleware_checks_its_limits() -> None:
    client = Client("/nonexistent", lazy=True)
    for mw in (WSGIMiddleware, ASGIMiddleware):
        with pytest.raises(TypeError, match="limit"):
            mw(wsgi_app, client, None, key=key)
        with pytest.raises(TypeError, match="concurrency="):
            mw(wsgi_app, client, TWO, key=key)
        with pytest.raises(InvalidLimit):
            mw(wsgi_app, client, None, key=key, concurrency=LIMIT)
        mw(wsgi_app, client, None, key=key, concurrency="concurrency:limit=3,lease=10s")
        mw(wsgi_app, client, None, key=key, concurrency="uploads")  # a name: the sidecar's config says


def test_asgi_concurrency(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket, on_unavailable="raise") as client:
            gates: Dict[str, asyncio.Event] = {}
            running: List[str] = []

            async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
                running.append(scope["path"])
                if scope["path"] in gates:
                    await gates[scope["path"]].wait()
                await asgi_app(scope, receive, send)

            async def request(path: str) -> Tuple[int, Dict[bytes, bytes], bytes]:
                sent: List[Dict[str, Any]] = []

                async def send(message: Dict[str, Any]) -> None:
                    sent.append(message)

                await mw({"type": "http", "method": "GET", "path": path, "headers": [],
                          "client": ("10.3.0.1", 5000)}, None, send)
                return sent[0]["status"], dict(sent[0]["headers"]), sent[1]["body"]

            mw = ASGIMiddleware(app, client, None, key=scope_key, concurrency=TWO)
            gates.update(a=asyncio.Event(), b=asyncio.Event())
            a, b = asyncio.ensure_future(request("a")), asyncio.ensure_future(request("b"))
            while len(running) < 2:
                await asyncio.sleep(0.001)
            assert (await client.peek("ip:10.3.0.1", TWO)).remaining == 0
            status, headers, body = await request("c")
            assert status == 429 and body == b"Too Many Requests\n" and b"retry-after" not in headers
            assert running == ["a", "b"]  # c never reached the app
            gates["a"].set()
            assert (await a)[0] == 200
            assert (await client.peek("ip:10.3.0.1", TWO)).remaining == 1
            assert (await request("d"))[0] == 200  # admitted
            gates["b"].set()
            assert (await b)[0] == 200
            assert (await client.peek("ip:10.3.0.1", TWO)).remaining == 2

    asyncio.run(asyncio.wait_for(main(), 20))


def test_asgi_concurrency_released_on_exception_and_cancellation(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket, on_unavailable="raise") as client:
            entered = asyncio.Event()

            async def failing(scope: Any, receive: Any, send: Any) -> None:
                raise RuntimeError("boom")

            async def forever(scope: Any, receive: Any, send: Any) -> None:
                entered.set()
                await asyncio.Event().wait()

            async def ignore(message: Any) -> None:
                pass

            scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
            mw = ASGIMiddleware(failing, client, None, key=lambda scope: "conc", concurrency=TWO)
            for _ in range(3):
                with pytest.raises(RuntimeError, match="boom"):
                    await mw(scope, None, ignore)
                assert (await client.peek("conc", TWO)).remaining == 2
            mw = ASGIMiddleware(forever, client, None, key=lambda scope: "conc", concurrency=TWO)
            for _ in range(3):  # as a server cancels the request's task when the client disconnects
                entered.clear()
                task = asyncio.ensure_future(mw(scope, None, ignore))
                await entered.wait()
                assert (await client.peek("conc", TWO)).remaining == 1
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert (await client.peek("conc", TWO)).remaining == 2

            async def async_key(scope: Any) -> str:
                return "conc"
            with Client(sidecar.socket, on_unavailable="raise") as sync:  # a sync client, an async key
                mw = ASGIMiddleware(failing, sync, None, key=scope_key, concurrency=TWO,  # key: not called
                                    concurrency_key=async_key)
                with pytest.raises(RuntimeError, match="boom"):
                    await mw(scope, None, ignore)
                assert sync.peek("conc", TWO).remaining == 2

    asyncio.run(asyncio.wait_for(main(), 20))


def test_asgi_concurrency_shadow(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with AsyncClient(sidecar.socket, on_unavailable="raise") as client:
            one = Concurrency(1, "1m")
            sent: List[Dict[str, Any]] = []

            async def send(message: Dict[str, Any]) -> None:
                sent.append(message)

            async def ban(scope: Any, receive: Any, send: Any) -> None:
                await send({"type": "http.response.start", "status": 202, "headers": []})
                await send({"type": "http.response.body", "body": b"queued"})

            scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "client": ("10.4.0.1", 1)}
            held = await client.lease("ip:10.4.0.1", one)
            for mw in (ASGIMiddleware(asgi_app, client, None, key=scope_key, concurrency=one, shadow=True),
                       ASGIMiddleware(asgi_app, client, None, key=scope_key, concurrency=one, shadow=True,
                                      shadow_ban=ban),
                       ASGIMiddleware(asgi_app, client, None, key=scope_key, concurrency=one)):
                await mw(scope, None, send)
            assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [200, 202, 429]
            assert await client.release("ip:10.4.0.1", one, held)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_wsgi_and_asgi_policies(sidecar: Sidecar) -> None:
    # Several policies, all or nothing: the headers list each and name the closest to its limit.
    client = Client(sidecar.socket, on_unavailable="raise")
    daily = "quota:limit=3,period=day"
    app = WSGIMiddleware(wsgi_app, client, TokenBucket(2, 3600, 2), key=key, name="burst", policies=[("daily", daily)])
    status, headers, _ = call_wsgi(app, "10.0.0.9")
    assert status == "200 OK" and headers["ratelimit-policy"] == '"burst";q=2;w=3600, "daily";q=3;w=86400'
    assert headers["ratelimit"].startswith('"burst";r=1;t=')
    call_wsgi(app, "10.0.0.9")
    status, headers, _ = call_wsgi(app, "10.0.0.9")
    assert status == "429 Too Many Requests" and headers["ratelimit"].startswith('"burst";r=0;t=') and headers["retry-after"]
    assert client.peek("ip:10.0.0.9", daily).remaining == 1  # the denied request took nothing of the quota
    with pytest.raises(ValueError, match="cannot be shadowed"):
        WSGIMiddleware(wsgi_app, client, LIMIT, key=key, shadow=True, policies=[("daily", daily)])

    async def main() -> None:
        aclient = AsyncClient(sidecar.socket, on_unavailable="raise")
        aapp = ASGIMiddleware(asgi_app, aclient, GCRA(burst=5, count=1, period=60), key=scope_key,
                              policies=[("daily", daily)])
        status, headers, _ = await call_asgi(aapp, "10.0.0.10")
        assert status == 200 and headers[b"ratelimit-policy"] == b'"default";q=6;w=360, "daily";q=3;w=86400'
        assert headers[b"ratelimit"].startswith(b'"daily";r=2;t=')
        await aclient.close()
    asyncio.run(main())
