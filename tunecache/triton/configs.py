"""A kernel's configs: their names, how each one launches, and which ones a call may use.

The names are the candidate list stored with every entry (`keys.config_name`); a config that
`early_config_prune` makes up joins the list of names when it is first met. Nothing here
imports Triton: a config is anything shaped like `triton.Config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunecache.errors import BadArgumentError
from tunecache.triton.keys import config_name
from tunecache.triton.options import Options

__all__ = ["Choice", "ConfigSet", "all_kwargs"]

#: what a call launches: the config, the keyword arguments that launch it, and its own pre-hook
Choice = tuple[Any, dict[str, Any], Any]


def all_kwargs(config: Any) -> dict[str, Any]:
    """The keyword arguments that launch a config: Triton's `Config.all_kwargs()`."""
    method = getattr(config, "all_kwargs", None)
    if callable(method):
        return dict(method())
    out = dict(config.kwargs)
    for field in ("num_warps", "num_ctas", "num_stages", "maxnreg", "ir_override"):
        value = getattr(config, field, None)
        if value is not None:
            out[field] = value
    return out


class ConfigSet:
    """A kernel's configs by name, with the pruning Triton applies to them for one call."""

    def __init__(self, configs: list[Any], options: Options, op: str) -> None:
        #: the configs, in order (Triton's `Autotuner.configs`)
        self.configs = configs
        #: the configs' names, in order: the candidate list stored with every entry
        self.names = tuple(config_name(c) for c in configs)
        #: name -> config, for every config met so far (made-up ones included)
        self.by_name: dict[str, Any] = dict(zip(self.names, configs, strict=True))
        self._choices: dict[str, Choice] = {}
        self._options = options
        self._op = op

    def name_of(self, config: Any) -> str:
        """The name of a config, one of the list's or one `early_config_prune` made up."""
        for name, known in self.by_name.items():
            if known is config:
                return name
        name = config_name(config)
        # A config early_config_prune made up: a candidate of the keys that meet it.
        self.by_name.setdefault(name, config)
        return name

    def choice(self, name: str) -> Choice:
        """What launching the config called `name` takes, worked out once per config."""
        found = self._choices.get(name)
        if found is None:
            config = self.by_name[name]
            found = self._choices[name] = (
                config,
                all_kwargs(config),
                getattr(config, "pre_hook", None),
            )
        return found

    def legal(self, nargs: Mapping[str, Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """The configs a call may use: what `early_config_prune` keeps, or all of them."""
        early = self._options.early_prune
        if early is None:
            return self.configs
        legal = list(early(self.configs, nargs, **kwargs))
        if not legal:
            raise BadArgumentError(
                f"{self._op}: early_config_prune returned no config; it must keep one"
            )
        return legal

    def top_k(
        self, legal: list[Any], nargs: Mapping[str, Any], kwargs: Mapping[str, Any]
    ) -> list[Any]:
        """Of the legal configs, the `top_k` that `perf_model` predicts fastest (all without
        a model), as Triton benches them."""
        model = self._options.perf_model
        if model is None:
            return legal
        top_k = self._options.top_k
        if isinstance(top_k, float):
            # Triton 3.6 takes int(len * top_k), which can be 0 and then crashes; keep one.
            top_k = max(1, int(len(self.configs) * top_k))
        if len(legal) <= top_k:
            return legal
        estimates = [model(**nargs, **kwargs, **all_kwargs(c)) for c in legal]
        order = sorted(range(len(legal)), key=lambda i: estimates[i])
        return [legal[i] for i in order[:top_k]]
