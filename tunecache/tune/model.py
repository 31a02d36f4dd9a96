"""A model: the whole workload a session tunes, and the scenarios it is tuned at."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tunecache.checks import is_int
from tunecache.errors import BadArgumentError

__all__ = ["Model", "as_model", "scenario_text"]


@dataclass(frozen=True)
class Model:
    """A whole workload: `run(**scenario)` runs one inference, calling tunable ops.

    `scenarios` gives the sizes to tune each symbolic dim at (an LLM's prefill length s:
    ``{"s": (1, 64, 256, 1024)}``); the model is tuned at every combination. `fingerprint`
    identifies this version of the model; by default it is derived from the keys its runs use,
    so a model whose ops change gets a new one, and its old verdicts stop applying.
    """

    name: str
    run: Callable[..., object]
    scenarios: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    fingerprint: str | None = None
    #: waits for queued device work (GPU: torch.cuda.synchronize), so runs and benches are
    #: timed to their end; None for a model that runs synchronously
    sync: Callable[[], object] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise BadArgumentError("a model is named by a non-empty string")
        if not callable(self.run):
            raise BadArgumentError(f"model {self.name!r}: run is not callable")
        checked = self._checked_scenarios()
        object.__setattr__(self, "scenarios", checked)
        if self.fingerprint is not None and not isinstance(self.fingerprint, str):
            raise BadArgumentError(f"model {self.name!r}: a fingerprint is a string")
        if self.sync is not None and not callable(self.sync):
            raise BadArgumentError(f"model {self.name!r}: sync is not callable")
        self._check_run_takes(checked)

    def _checked_scenarios(self) -> dict[str, tuple[int, ...]]:
        if not isinstance(self.scenarios, Mapping):
            raise BadArgumentError(
                f"model {self.name!r}: scenarios map each symbolic dim to its sizes, "
                f"got {type(self.scenarios).__name__}"
            )
        checked: dict[str, tuple[int, ...]] = {}
        for dim, sizes in dict(self.scenarios).items():
            values = tuple(sizes) if isinstance(sizes, Iterable) else (sizes,)
            if not values or any(not is_int(size) or size < 1 for size in values):
                raise BadArgumentError(
                    f"model {self.name!r}: scenario {dim!r} needs positive integer sizes, "
                    f"got {sizes!r}"
                )
            checked[str(dim)] = values
        return checked

    def _check_run_takes(self, scenarios: Mapping[str, tuple[int, ...]]) -> None:
        try:
            signature = inspect.signature(self.run)
        except (TypeError, ValueError):  # a builtin without one: its calls will tell
            return
        try:
            signature.bind(**dict.fromkeys(scenarios, 1))
        except TypeError as error:
            raise BadArgumentError(
                f"model {self.name!r}: run cannot take its scenario dims {list(scenarios)}: {error}"
            ) from None

    def cases(self) -> list[dict[str, int]]:
        """Every scenario to run: each combination of the symbolic dims' sizes ([{}] if none)."""
        dims = list(self.scenarios)
        return [
            dict(zip(dims, sizes, strict=True))
            for sizes in itertools.product(*(self.scenarios[dim] for dim in dims))
        ]


def as_model(value: object, name: str | None = None) -> Model:
    """A Model as it is, or a plain callable as a model without scenarios."""
    if isinstance(value, Model):
        return value
    if callable(value):
        label = name or getattr(value, "__qualname__", None) or getattr(value, "__name__", "")
        return Model(str(label), value)
    raise BadArgumentError(
        f"a model is a tunecache.tune.Model or a callable, got {type(value).__name__}"
    )


def scenario_text(case: Mapping[str, int]) -> str:
    """One scenario as a report names it: ``s=64 b=1``, or ``-`` for a model without any."""
    return " ".join(f"{dim}={size}" for dim, size in case.items()) or "-"
