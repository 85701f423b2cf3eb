"""WSGI and ASGI middleware, called directly with fake environs and scopes, and the header helpers."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Dict, List, Optional, Tuple

import pytest
from conftest import Sidecar

from sluice import (
    GCRA, AsyncClient, Client, Decision, FixedWindow, Pacer, SlidingWindow, TokenBucket, policy,
    ratelimit_headers, response_headers, retry_after,
)
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


def test_wsgi_when_the_sidecar_is_down() -> None:
    missing = os.path.join("/tmp", "sl-missing-%d.sock" % os.getpid())
    for_open = WSGIMiddleware(wsgi_app, Client(missing, on_unavailable="open"), LIMIT, key=key)
    status, headers, _ = call_wsgi(for_open, "1.2.3.4")
    assert status == "200 OK" and "ratelimit" not in headers
    for_closed = WSGIMiddleware(wsgi_app, Client(missing, on_unavailable="closed"), LIMIT, key=key)
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
    app = ASGIMiddleware(asgi_app, AsyncClient("/nonexistent"), LIMIT, key=scope_key)
    assert asyncio.run(call_asgi(app, "1.2.3.4", kind="websocket"))[0] == 200  # never asked the (absent) sidecar


def test_policies() -> None:
    assert policy(TokenBucket(10, 3600, 1)) == (10, 36000)
    assert policy(TokenBucket(10, 3600)) == (10, 3600)
    assert policy(TokenBucket(10, 1, 3)) == (10, 4)
    assert policy(GCRA(4, 1, 1)) == (5, 5)
    assert policy(GCRA(0, 10, 1)) == (1, 1)  # w is at least a second
    assert policy(FixedWindow(100, 60)) == (100, 60)
    assert policy(SlidingWindow(100, 0.5)) == (100, 1)
    assert policy(Pacer(4, 1, 2)) == (9, 3)


def test_header_values() -> None:
    allowed = Decision(True, 7, 10, -1, 1_500_000_000, 0)
    assert ratelimit_headers(allowed, FixedWindow(10, 60), "api") == [
        ("RateLimit-Policy", '"api";q=10;w=60'), ("RateLimit", '"api";r=7;t=2')]
    assert retry_after(allowed) is None
    denied = Decision(False, 0, 10, 2_000_000_001, 30_000_000_000, 0)
    assert retry_after(denied) == "3"  # rounded up
    assert response_headers(denied, FixedWindow(10, 60))[-1] == ("Retry-After", "3")
    assert retry_after(Decision(False, 0, 10, -1, 0, 0)) is None  # never
    assert ratelimit_headers(Decision(True, 0, 0, -1, 0, 0, degraded=True), FixedWindow(10, 60)) == []
    assert ratelimit_headers(allowed, FixedWindow(10, 60), 'a"b\\')[0][1].startswith('"a\\"b\\\\";')


def test_wsgi_shadow(sidecar: Sidecar, caplog: Any) -> None:
    client = Client(sidecar.socket, on_unavailable="raise")
    one = GCRA(0, 1, 3600)
    app = WSGIMiddleware(wsgi_app, client, one, key=key, shadow=True)
    for _ in range(3):  # the limit would deny the 2nd and 3rd: they go through, logged
        assert call_wsgi(app, "10.0.0.7")[0] == "200 OK"
    assert sum("shadow-denied" in r.getMessage() for r in caplog.records) == 2

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
