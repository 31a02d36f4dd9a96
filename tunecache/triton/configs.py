"""A kernel's configs: their names, how each one launches, and which ones a call may use.

The names are the candidate list stored with every entry (`warm.config_name`); a config that
`early_config_prune` makes up joins the list of names when it is first met. Nothing here
imports Triton: a config is anything shaped like `triton.Config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunecache.errors import BadArgumentError
from tunecache.triton.autotuner import Options
from tunecache.triton.warm import all_kwargs, config_name

__all__ = ["Choice", "ConfigSet", "NoConfigError", "all_kwargs"]

#: what a call launches: the config, the keyword arguments that launch it, and its own pre-hook
Choice = tuple[Any, dict[str, Any], Any]


class NoConfigError(BadArgumentError):
    """`early_config_prune` kept no config for a call: there is nothing to launch.

    On a GPU the error raised is a subclass of this one and of `triton.TritonError` too
    (`tunecache.triton.gpu`), so that `except triton.TritonError` catches it, as it catches
    Triton's own "No valid autotuner configs after pruning".
    """


class ConfigSet:
    """A kernel's configs by name, with the pruning Triton applies to them for one call."""

    def __init__(
        self,
        configs: list[Any],
        options: Options,
        op: str,
        no_config_error: type[NoConfigError] | None = None,
        names: tuple[str, ...] | None = None,
    ) -> None:
        #: the configs, in order (Triton's `Autotuner.configs`)
        self.configs = configs
        #: the configs' names, in order: the candidate list stored with every entry (`names`,
        #: where the caller has them: `config_name` of each config)
        self.names = tuple(config_name(c) for c in configs) if names is None else names
        #: name -> config, for every config met so far (made-up ones included)
        self.by_name: dict[str, Any] = dict(zip(self.names, configs, strict=True))
        self._choices: dict[str, Choice] = {}
        self._options = options
        self._op = op
        self._no_config = no_config_error or NoConfigError

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
            # Triton's own words first, for code that matches them.
            raise self._no_config(
                f"No valid autotuner configs after pruning: {self._op}'s early_config_prune"
                " returned no config; it must keep one"
            )
        return legal

    def only(self, legal: list[Any], nargs: Mapping[str, Any], kwargs: Mapping[str, Any]) -> Any:
        """The one config pruning leaves, launched without a bench as Triton does (the only
        legal one, or `perf_model`'s pick when `top_k` keeps one), or None when a bench must
        choose."""
        if len(legal) == 1:
            return legal[0]
        if self._options.perf_model is not None and self._count() == 1:
            return self.top_k(legal, nargs, kwargs)[0]
        return None

    def _count(self) -> int:
        """How many configs `perf_model` keeps (`top_k`, a float taken of the whole list)."""
        top_k = self._options.top_k
        if isinstance(top_k, float):
            # Triton 3.6 takes int(len * top_k), which can be 0 and then crashes; keep one.
            return max(1, int(len(self.configs) * top_k))
        return top_k

    def top_k(
        self, legal: list[Any], nargs: Mapping[str, Any], kwargs: Mapping[str, Any]
    ) -> list[Any]:
        """Of the legal configs, the `top_k` that `perf_model` predicts fastest (all without
        a model), as Triton benches them."""
        model = self._options.perf_model
        if model is None:
            return legal
        top_k = self._count()
        if len(legal) <= top_k:
            return legal
        estimates = [model(**nargs, **kwargs, **all_kwargs(c)) for c in legal]
        order = sorted(range(len(legal)), key=lambda i: estimates[i])
        return [legal[i] for i in order[:top_k]]
