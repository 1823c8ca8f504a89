"""The metric names a PromQL expression selects, found without a PromQL parser (promtool is optional here)."""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([^"]+)"')
_LABELS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# an identifier not inside a longer word, a number (1e3, 3h) or a Grafana variable ($__range)
_IDENTIFIER = re.compile(r"(?<![\w:$.])([A-Za-z_:][\w:]*)")
_FUNCTION_CALL = re.compile(r"\s*\(")
KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
    | {"atan2", "inf", "nan"}
)
# Grafana's range variables, replaced by a plain duration so the expression is valid PromQL
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h"}


def without_grafana_variables(expr: str) -> str:
    for variable, duration in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, duration)
    return expr


def metric_names(expr: str) -> set[str]:
    """Every metric the expression selects; function names, keywords and label names are not metrics."""
    names = set(_NAME_MATCHER.findall(expr))
    text = _STRING.sub('""', expr)
    text = _LABELS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    for match in _IDENTIFIER.finditer(text):
        word = match.group(1)
        if word.lower() in KEYWORDS or _FUNCTION_CALL.match(text, match.end()):
            continue
        names.add(word)
    return names
