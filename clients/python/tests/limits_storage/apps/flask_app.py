"""Flask with Flask-Limiter on the sluice storage: the storage URI, strategy and limit from the
environment; each answer names the worker (pid) that served it."""

import os

import sluice.limits_storage  # noqa: F401 (registers sluice://)
from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

app = Flask(__name__)
limiter = Limiter(get_remote_address, app=app, storage_uri=os.environ["STORAGE_URI"],
                  strategy=os.environ["STRATEGY"])


@app.get("/hit")
@limiter.limit(os.environ["LIMIT"])
def hit():
    return "ok", 200, {"X-Worker": str(os.getpid())}
