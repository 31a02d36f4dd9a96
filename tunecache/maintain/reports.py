"""What every maintenance report has in common: a `--json` form, field by field."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from tunecache.errors import BadArgumentError
from tunecache.frozen import Frozen

# Not `typing` at run time: `tunecache list` starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Report", "aware", "jsonable"]


def jsonable(value: Any) -> Any:
    """A report value as JSON data: times in ISO 8601, tuples as lists, bytes as hex."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Frozen):
        return {name: jsonable(getattr(value, name)) for name in value.__match_args__}
    if hasattr(type(value), "__dataclass_fields__"):  # an instance, not a dataclass itself
        import dataclasses  # loaded already: it made the value's class

        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


class Report:
    """A value the command line prints: `as_dict` is its `--json` form, field by field."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        """This value as JSON-ready data, one key per field."""
        fields: dict[str, Any] = jsonable(self)
        return fields


def aware(value: datetime | None, what: str) -> datetime | None:
    """`value` itself, refusing a datetime without a time zone (BadArgumentError)."""
    if value is not None and value.tzinfo is None:
        raise BadArgumentError(f"{what} must be a timezone-aware datetime")
    return value
