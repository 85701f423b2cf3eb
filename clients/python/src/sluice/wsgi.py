"""WSGI middleware: one acquire per request, 429 when denied; optionally a
concurrency limit's slot held while the request runs.

::

    from sluice import Client, Concurrency, GCRA
    from sluice.wsgi import RateLimitMiddleware

    client = Client()  # one per process; safe to create before gunicorn forks
    app.wsgi_app = RateLimitMiddleware(          # Flask; for Django wrap get_wsgi_application()
        app.wsgi_app, client, GCRA(burst=10, count=5, period=1),
        key=lambda environ: "ip:" + environ.get("REMOTE_ADDR", "?"),
        concurrency=Concurrency(limit=4, lease="1m"),  # optional: at most 4 requests at once per IP
    )

``key`` maps the WSGI environ to the bucket's key; returning None lets the
request through unlimited (health checks, staff). ``limit`` is any limit the
client accepts: a limit of any algorithm but concurrency, a spec, or a name
from the sidecar's config. A denied request gets ``429 Too Many Requests``
with ``Retry-After`` (whole seconds, rounded up) and the ``RateLimit-Policy``
/ ``RateLimit`` headers; an allowed one goes to the app and its response gets
the two RateLimit headers added (unless ``headers=False``). An allowed pacer
decision waits its ``delay`` before calling the app.

When a decision fails, the client's ``on_unavailable`` policy decides if the
sidecar cannot ("open" lets requests through without RateLimit headers;
"closed" answers 429 without ``Retry-After``; "raise" answers 503): an outage
of a sidecar that answered the client before, a full table, an internal
error. A sidecar that has never answered gets 503, and a mistake (an unknown
name, an invalid limit, a limit this sidecar cannot serve, a refused
process, an invalid key) 500, whatever the policy: such a request is never
let through. Each kind of failure is logged at ERROR on the ``sluice``
logger, at most once every 10 s (see the README's "Failure policies").

``concurrency`` (a :class:`~sluice.Concurrency` limit, or the name of one in
the sidecar's config) makes every request hold one of its slots while it
runs, as nginx's limit_conn does, for the key ``concurrency_key(environ)``
(by default ``key``'s; None: no slot). The slot is leased once the rate
limit allowed the request (and its pacer delay was waited) and released
when the response iterable is closed or exhausted, whichever comes first,
or when the app raises: a streamed response holds it until it is done.
(The response is wrapped for that, so a server's ``wsgi.file_wrapper``
fast path does not see it.)
``limit`` may be None for a concurrency limit alone; its responses then carry
its own RateLimit pair, ``"NAME";q=LIMIT;qu="concurrent-requests"`` and
``"NAME";r=FREE``. When every slot is held the request is answered ``429 Too
Many Requests`` as a rate-limit denial is, without ``Retry-After`` (a slot
frees when a request finishes, which nothing foresees; the lease's
``retry_after`` only bounds that by the lease time); with a rate limit too,
the rate limit's RateLimit pair is added as to an allowed response. Failures
are handled as the acquire's: "open" lets the request through holding no
slot, "closed" answers 429. A release the sidecar does not answer is logged,
not raised: the lease expires on its own after the limit's ``lease`` time.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from ._calls import Key
from ._middleware_core import APP, CALL, RESPOND, SHADOW_BAN, SLEEP, MiddlewareCore
from .errors import SluiceError

__all__ = ["RateLimitMiddleware"]

StartResponse = Callable[..., Any]
Environ = Dict[str, Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
KeyFunc = Callable[[Environ], Optional[Key]]


class RateLimitMiddleware(MiddlewareCore):
    """Wrap a WSGI app so that every request acquires ``cost`` of ``limit`` for ``key(environ)``.

    Args:
        app: the WSGI application.
        client: a :class:`~sluice.Client`.
        limit: the limit every request is counted against (a Limit or a
            spec); None for none (``concurrency`` alone).
        key: environ -> key (str or bytes), or None to let the request through.
        cost: tokens per request.
        name: the policy name in the RateLimit headers.
        headers: add the RateLimit headers to allowed responses too.
        shadow: make every acquire a shadow request: a request the limit would
            deny is let through and logged (WARNING, logger "sluice"). A limit
            the sidecar's config marks shadow does the same without it. A
            request the concurrency limit would deny is let through too,
            holding no slot, and logged.
        shadow_ban: answer a shadow-denied request with this WSGI app instead of
            ``app`` (it should answer 2xx): the caller sees success while the
            work is not done (a shadow ban).
        concurrency: a :class:`~sluice.Concurrency` limit (or a spec, or the
            name of one in the sidecar's config): every request holds one of
            its slots from before ``app`` is called until its response is
            closed or exhausted, or ``app`` raises.
        concurrency_key: environ -> the concurrency limit's key, or None for
            no slot; by default the key ``key`` gave.
        policies: (name, limit) pairs decided with ``limit``, all or nothing
            (one multi: each on the request's key, at ``cost``): a request
            passes only if each allows it. Its RateLimit headers describe
            every policy (:func:`sluice.headers.response_headers_of`),
            ``limit``'s first, named ``name``. Not with ``shadow``.
    """

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        steps = self._steps(environ)
        answer: Any = None
        while True:
            verb, arg = steps.send(answer)
            answer = None
            if verb == CALL:
                try:
                    answer = arg()
                except SluiceError as e:
                    answer = e
            elif verb == SLEEP:
                time.sleep(arg)
            elif verb == RESPOND:
                start_response(f"{arg.status} {arg.reason}", arg.headers)
                return [arg.body]
            elif verb == SHADOW_BAN:
                return self.shadow_ban(environ, start_response)  # type: ignore[no-any-return]
            else:
                assert verb == APP
                return self._app(environ, start_response, *arg)

    def _app(self, environ: Environ, start_response: StartResponse, add: Optional[List[Tuple[str, str]]],
             lease: Optional[Tuple[Key, int]]) -> Iterable[bytes]:
        """The app's response, with the headers of ``add`` it did not set, holding ``lease``
        (key, id) until it is closed or exhausted, or the app raises."""
        start = start_response if add is None else _adding(start_response, add)
        if lease is None:
            return self.app(environ, start)  # type: ignore[no-any-return]
        key, lease_id = lease

        def release() -> None:
            try:
                self.client.release(key, self.concurrency, lease_id)
            except SluiceError as e:
                self._release_failed(key, lease_id, e)

        try:
            return _Held(self.app(environ, start), release)
        except BaseException:
            release()
            raise


def _adding(start_response: StartResponse, extra: List[Tuple[str, str]]) -> StartResponse:
    """start_response adding the headers of ``extra`` the app did not set itself."""

    def start(status: str, response_headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        have = {h.lower() for h, _ in response_headers}
        add = [(h, v) for h, v in extra if h.lower() not in have]
        return start_response(status, list(response_headers) + add, exc_info) if exc_info \
            else start_response(status, list(response_headers) + add)

    return start


class _Held:
    """A response iterable that calls ``release`` once, when it is exhausted, fails, or is closed."""

    def __init__(self, body: Iterable[bytes], release: Callable[[], None]) -> None:
        self._body = body
        self._it = iter(body)
        self._release: Optional[Callable[[], None]] = release

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._it)
        except BaseException:  # StopIteration included: the response is done
            self._done()
            raise

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._done()

    def _done(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()
