"""The example workload: real numpy ops with real alternatives, and small models built on them.

    import tunecache
    from tunecache.examples import MODELS
    for model in MODELS:
        tunecache.tune.tune(model)

`ops` holds the tunable ops (`conv2d`, `chain3`, `chain4`, `matmul`), a template for making an
op of your own tunable; `models` holds the models (`MODELS`) and the held-out split (`TUNED`,
`HELD_OUT`). Importing builds the models' small weight arrays and nothing else: no timing, no
cache access.
"""

from __future__ import annotations

from tunecache.examples.models import HELD_OUT, MODELS, TUNED
from tunecache.examples.ops import chain3, chain4, conv2d, matmul

__all__ = ["HELD_OUT", "MODELS", "TUNED", "chain3", "chain4", "conv2d", "matmul"]
