"""FastAPI with SlowAPI on the sluice storage: the storage URI, strategy and limit from the
environment; each answer names the worker (pid) that served it."""

import os

import sluice.limits_storage  # noqa: F401 (registers sluice://)
from fastapi import FastAPI, Request, Response
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

limiter = Limiter(key_func=get_remote_address, storage_uri=os.environ["STORAGE_URI"],
                  strategy=os.environ["STRATEGY"])
app = FastAPI()
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)


@app.get("/hit")
@limiter.limit(os.environ["LIMIT"])
def hit(request: Request, response: Response):
    response.headers["X-Worker"] = str(os.getpid())
    return "ok"
