"""vast.ai's query syntax, as the simulator understands it: `field: {op: value}` filters, `order`, `limit`.

Used for offer search bodies (`POST /api/v0/bundles/`) and the `select_filters`/`order_by` parameters of
`GET /api/v1/instances/`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b,
    "neq": lambda a, b: a != b,
    "gt": lambda a, b: a is not None and a > b,
    "gte": lambda a, b: a is not None and a >= b,
    "lt": lambda a, b: a is not None and a < b,
    "lte": lambda a, b: a is not None and a <= b,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}

# keys of a search body that are not field filters
SEARCH_OPTIONS = frozenset({"order", "type", "limit", "allocated_storage", "disable_bundling", "extra_ids"})
OFFER_TYPES = frozenset({"on-demand", "ondemand", "bid", "reserved"})


class QueryError(ValueError):
    """The query is malformed; the message names the key and the value."""


@dataclass(frozen=True)
class Filter:
    field: str
    op: str
    value: Any

    def matches(self, row: Mapping[str, Any]) -> bool:
        value = row.get(self.field)
        try:
            return OPS[self.op](value, _like(self.value, value))
        except TypeError:  # comparing across types (a None, a str with a number) never matches
            return False


def _like(wanted: Any, value: Any) -> Any:
    """The CLI sends every number of its query language as a string (`num_gpus=1` → `{"eq": "1"}`, vast-cli
    `parse_query`); vast compares it as the field's number, so a numeric string meets a numeric field as one."""
    if isinstance(wanted, list):
        return [_like(item, value) for item in wanted]
    if isinstance(wanted, str) and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(wanted)
        except ValueError:
            return wanted
    return wanted


@dataclass(frozen=True)
class Query:
    filters: list[Filter] = field(default_factory=list)
    order: list[tuple[str, bool]] = field(default_factory=list)  # (field, descending)
    limit: int | None = None
    offer_type: str = "on-demand"
    allocated_storage_gb: float = 5.0

    def apply(self, rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        selected = [row for row in rows if all(f.matches(row) for f in self.filters)]
        # stable sorts from the last key to the first give a multi-key order; None sorts last either way
        for name, descending in reversed(self.order):
            present = [row for row in selected if row.get(name) is not None]
            missing = [row for row in selected if row.get(name) is None]
            present.sort(key=lambda row, name=name: row[name], reverse=descending)  # type: ignore[misc]
            selected = present + missing
        return selected if self.limit is None else selected[: self.limit]


def parse_filters(raw: Mapping[str, Any], *, skip: frozenset[str] = frozenset()) -> list[Filter]:
    filters = []
    for name, condition in raw.items():
        if name in skip:
            continue
        if not isinstance(condition, Mapping):
            # the vast CLI accepts `field: value` as shorthand for eq
            filters.append(Filter(name, "eq", condition))
            continue
        for op, value in condition.items():
            if op not in OPS:
                raise QueryError(f"{name}: unknown operator {op!r}; expected one of {sorted(OPS)}")
            if op in ("in", "notin") and not isinstance(value, list):
                raise QueryError(f"{name}.{op}: expected a list, got {value!r}")
            filters.append(Filter(name, op, value))
    return filters


def parse_order(raw: Any) -> list[tuple[str, bool]]:
    """`[["dph_total","asc"], ...]`, a single `["dph_total","asc"]`, or v1's `[{"col":..,"dir":..}]`."""
    if raw is None:
        return []
    if isinstance(raw, list) and len(raw) == 2 and all(isinstance(x, str) for x in raw):
        raw = [raw]
    if not isinstance(raw, list):
        raise QueryError(f"order: expected a list, got {raw!r}")
    order = []
    for item in raw:
        if isinstance(item, Mapping):
            name, direction = item.get("col"), item.get("dir", "asc")
        elif isinstance(item, list | tuple) and len(item) in (1, 2):
            name, direction = item[0], (item[1] if len(item) == 2 else "asc")
        else:
            raise QueryError(f"order: cannot read {item!r}")
        if not isinstance(name, str) or direction not in ("asc", "desc"):
            raise QueryError(f"order: expected a field and 'asc' or 'desc', got {item!r}")
        order.append((name, direction == "desc"))
    return order


def parse_search(body: Mapping[str, Any], *, default_limit: int) -> Query:
    """A `POST /api/v0/bundles/` body. The default order is vast's: `score` descending."""
    offer_type = body.get("type", "on-demand")
    if offer_type not in OFFER_TYPES:
        raise QueryError(f"type: expected one of {sorted(OFFER_TYPES)}, got {offer_type!r}")
    limit = body.get("limit", default_limit)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise QueryError(f"limit: expected a positive integer, got {limit!r}")
    storage = body.get("allocated_storage", 5.0)
    if not isinstance(storage, int | float) or storage < 0:
        raise QueryError(f"allocated_storage: expected GB as a number, got {storage!r}")
    return Query(
        filters=parse_filters(body, skip=SEARCH_OPTIONS),
        order=parse_order(body.get("order", [["score", "desc"]])),
        limit=limit,
        offer_type=offer_type,
        allocated_storage_gb=float(storage),
    )
