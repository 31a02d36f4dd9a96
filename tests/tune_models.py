"""Tiny real numpy models for the tuner's tests (and a FILE.py:ATTR target for the CLI).

Each op has a real alternative whose speed is not in doubt, so what the tuner writes is
predictable without asserting any time:

- `tt_rownorm`: the heuristic loops over rows in Python; `vectorized` is one numpy call (about
  30x faster here). It carries most of the models' time.
- `tt_total`: the heuristic is numpy's sum; `pysum` adds Python floats one by one (far slower),
  and `broken` raises, which the bench records and skips.
- `tt_bias`: a tiny op far below 1% of a run's time, which the tuner screens out.

`NORM`, `TOTAL` and `BIAS` are the keys the models run (the bias's data is `BIAS_DATA`).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

import tunecache
from tunecache.keys import make_key
from tunecache.tune import Model

Array = Any


def _rows(x: Array, *rest: Any) -> tuple[int, int]:
    return (x.shape[0], x.shape[1])


@tunecache.tunable("ttrownorm_F64", dims=("m", "n"), shape=_rows)
def loop(x: Array) -> Array:
    """The heuristic: one Python-level norm per row."""
    return np.array([float(np.sqrt(np.dot(row, row))) for row in x])


@loop.candidate("vectorized")
def vectorized(x: Array) -> Array:
    """The fast alternative: one numpy call for every row."""
    return np.sqrt(np.einsum("ij,ij->i", x, x))


@tunecache.tunable("tttotal_F64", dims=("n",), shape=lambda x: (x.size,))
def numpy_sum(x: Array) -> Array:
    return x.sum()


@numpy_sum.candidate("pysum")
def _pysum(x: Array) -> Array:
    return sum(x.ravel().tolist())


@numpy_sum.candidate("broken")
def _broken(x: Array) -> Array:
    raise ValueError("this candidate never works")


@tunecache.tunable("ttbias_F64", dims=("n",), shape=lambda v, b: (v.shape[0],))
def add(v: Array, b: Array) -> Array:
    return v + b


@add.candidate("inplace")
def _inplace(v: Array, b: Array) -> Array:
    out = v.copy()
    out += b
    return out


_rng = np.random.default_rng(7)
X = _rng.standard_normal((600, 48))
V = _rng.standard_normal(20_000)
BIAS_DATA = _rng.standard_normal(3)

NORM = make_key("ttrownorm_F64", [("m", 600), ("n", 48)])
TOTAL = make_key("tttotal_F64", [("n", 20_000)])
BIAS = make_key("ttbias_F64", [("n", 3)])


def encoder() -> Array:
    """Mostly row norms (the heavy key), a sum, and a tiny bias."""
    norms = loop(X)
    return add(norms[:3], BIAS_DATA).sum() + numpy_sum(V)


def scorer() -> Array:
    """Another model that shares the row-norm key with `encoder`."""
    return loop(X).sum()


def projector() -> Array:
    """A model that shares no key with the others' heavy ones."""
    return numpy_sum(V[:5000]) + add(X[0, :3], BIAS_DATA).sum()


def scaled(s: int) -> Array:
    """A model with a symbolic dim `s`: row norms of the first s rows."""
    return loop(X[:s]).sum()


ENCODER = Model("encoder", encoder)
SCORER = Model("scorer", scorer)
PROJECTOR = Model("projector", projector)
SCALED = Model("scaled", scaled, scenarios={"s": (150, 600)})
MODELS = [ENCODER, SCORER]


# A model for the SIGINT test: its row norms are accepted first; in the test's child process
# (TT_SIGINT_FD names the pipe to the parent), the first run after that entry is committed says
# so on the pipe and waits for the signal, so the signal always lands inside the session, after
# the accept, whatever the machine's speed.
def interruptible() -> Array:
    """The row norms; then, in the SIGINT test's child, the wait for the signal."""
    total = loop(X).sum()
    ready = os.environ.get("TT_SIGINT_FD")
    if ready and tunecache.current().resolve(NORM, loop.candidates, "loop").entry_id is not None:
        os.write(int(ready), b"accepted\n")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.01)  # SIGINT raises KeyboardInterrupt here
        raise RuntimeError("the SIGINT never came")
    return total


INTERRUPTIBLE = Model("interruptible", interruptible)
