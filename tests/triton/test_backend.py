"""tunecache.triton.backend: what the autotuner asks of a machine, and its defaults."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from tests.triton.fake import FAST, GPU
from tunecache.triton.backend import Backend, clone


def test_a_tensor_argument_is_copied_and_anything_else_is_kept() -> None:
    array = np.arange(4.0)
    copied = clone(array)
    assert copied is not array
    np.testing.assert_array_equal(copied, array)
    torch_like = SimpleNamespace(dtype="float16", clone=lambda: "a clone", copy=lambda: "a copy")
    assert clone(torch_like) == "a clone"  # torch's .clone() before numpy's .copy()
    scalar_like = SimpleNamespace(dtype="int32")
    assert clone(scalar_like) is scalar_like and clone(7) == 7


def test_a_backend_needs_only_the_device_identity() -> None:
    backend = Backend(device=lambda index: GPU)
    assert backend.current() == 0 and backend.sync is None and backend.failures == ()
    assert backend.flush is None and backend.default_config is None and backend.bench == {}
    with backend.context(3, True):
        pass
    assert backend.clone is clone
    options = dict(FAST)
    own = Backend(device=lambda index: GPU, bench=options)
    options["budget"] = 9.0
    assert own.bench == FAST  # a copy: the caller's dict is never shared
