"""FastAPI with SlowAPI on the sluice storage: the storage URI, strategy and limit from the
environment, the key from the query (?k=); each answer names the worker (pid) that served it."""

import os

import sluice.limits_storage  # noqa: F401 (registers sluice://)
from fastapi import FastAPI, Request
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded

limiter = Limiter(key_func=lambda request: request.query_params["k"], storage_uri=os.environ["STORAGE_URI"],
                  strategy=os.environ["STRATEGY"])
app = FastAPI()
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)


@app.middleware("http")
async def worker(request: Request, call_next):
    response = await call_next(request)
    response.headers["X-Worker"] = str(os.getpid())
    return response


@app.get("/hit")
@limiter.limit(os.environ["LIMIT"])
def hit(request: Request):
    return "ok"
