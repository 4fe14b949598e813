"""Attribute values OpenTelemetry accepts and an OTLP exporter can encode.

One bad value (an int beyond int64, a string that is not valid UTF-8) makes an OTLP exporter drop
its whole batch: what does not fit is dropped or converted here, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

_LOG = logging.getLogger("gym_instrument")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INT64_MIN, _INT64_MAX = INT64_MIN, INT64_MAX


def utf8_safe(text: str) -> str:
    """The string itself when it encodes as UTF-8; else with lone surrogates replaced.

    An OTLP exporter drops its whole batch on one string that is not valid UTF-8.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _clean_scalar(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return utf8_safe(value)
    if kind is bool or kind is float:
        return value
    if kind is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    if isinstance(value, str):  # subclasses: use the plain string, not a custom __str__
        return utf8_safe(str.__str__(value))
    return None


def clean_value(value: Any) -> Any:
    """A valid OpenTelemetry attribute value an OTLP exporter can encode, or None to drop it."""
    cleaned = _clean_scalar(value)
    if cleaned is not None or value is None:
        return cleaned
    if isinstance(value, (list, tuple)):
        items = [_clean_scalar(item) for item in value]
        kinds = {type(item) for item in items}
        if None in items or len(kinds) > 1:
            return None  # mixed or unencodable items: OpenTelemetry wants one type per sequence
        return tuple(items)
    return None


def clean_attributes(attributes: Mapping[str, Any], into: dict[str, Any]) -> None:
    """Copy the attributes that fit into ``into``; drop (with a debug line) those that do not."""
    for key, value in attributes.items():
        if not isinstance(key, str) or not key:
            continue
        cleaned = clean_value(value)
        if cleaned is None:
            _LOG.debug("gym_instrument: dropped attribute %r: not a valid OpenTelemetry value", utf8_safe(key))
            continue
        into[utf8_safe(key)] = cleaned
