"""Flask with Flask-Limiter on the sluice storage: the storage URI, strategy and limit from the
environment, the key from the query (?k=); each answer names the worker (pid) that served it."""

import os

import sluice.limits_storage  # noqa: F401 (registers sluice://)
from flask import Flask, request
from flask_limiter import Limiter

app = Flask(__name__)
limiter = Limiter(lambda: request.args["k"], app=app, storage_uri=os.environ["STORAGE_URI"],
                  strategy=os.environ["STRATEGY"])


@app.after_request
def worker(response):
    response.headers["X-Worker"] = str(os.getpid())
    return response


@app.get("/hit")
@limiter.limit(os.environ["LIMIT"])
def hit():
    return "ok"
