"""JSON validation of job arguments and results: JSON only, never pickle, and bounded in size."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

from .exceptions import PayloadNotJSON, PayloadTooLarge

_SCALARS = (str, int, bool, type(None))
_LEAVE = object()  # marks, on the stack, the end of a container's items
# Integers this short always convert to text: Python's int-to-text limit is at least 640 digits.
_SHORT_INT_BITS = 2000


# The deepest nesting of lists and dicts a payload may have: SQLite's JSON functions refuse
# more than 1000 levels, and Python before 3.13 cannot encode much more than that either, so
# the limit holds the same on every Python and database.
MAX_DEPTH = 900


def find_non_json(value: Any, path: str) -> tuple[str, str] | None:
    """Return (path, reason) of the first part of ``value`` that does not round-trip as JSON."""
    stack: list[tuple[Any, Any]] = [(value, path)]
    # Ids of the containers on the path being walked: meeting one again is a cycle, which would
    # otherwise loop forever. A container shared by two branches is not a cycle.
    enclosing: set[int] = set()
    while stack:
        item, where = stack.pop()
        if item is _LEAVE:
            enclosing.discard(where)
            continue
        if isinstance(item, _SCALARS):
            if isinstance(item, int) and item.bit_length() > _SHORT_INT_BITS and _too_long(item):
                return where, (
                    f"is an integer of more than {sys.get_int_max_str_digits():,} digits, "
                    f"which Python cannot write as JSON text (pass it as a string)"
                )
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return where, f"is {item!r}, which JSON cannot represent"
            continue
        if isinstance(item, list | tuple | dict):
            if id(item) in enclosing:
                return where, "refers back to a list or dict containing it (a circular reference)"
            if len(enclosing) >= MAX_DEPTH:
                return where, (
                    f"is nested too deeply (more than {MAX_DEPTH} levels of lists and dicts) "
                    f"to store as JSON; flatten it"
                )
            enclosing.add(id(item))
            stack.append((_LEAVE, id(item)))
        if isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
            continue
        if isinstance(item, dict):
            for key, v in reversed(list(item.items())):
                if not isinstance(key, str):
                    return where, (
                        f"has the key {describe(key)} of type {type(key).__name__}; JSON object "
                        f"keys are strings (convert the key with str())"
                    )
                stack.append((v, f"{where}[{describe(key)}]"))
            continue
        hint = " (pass value.isoformat())" if hasattr(item, "isoformat") else ""
        return where, f"is a {type(item).__module__}.{type(item).__qualname__}, not JSON{hint}"
    return None


def acyclic_encoder(*, ensure_ascii: bool, allow_nan: bool) -> Callable[[Any], str]:
    """``json.JSONEncoder(separators=(",", ":"), ...).encode``, made once, for values that
    cannot hold a cycle (a flat list or dict of scalars, an outcome's row): the same text.
    ``JSONEncoder.encode`` makes a C encoder anew on every call, which every job's result and
    outcome row paid; this one is made here and kept (without the cycle check's table, which
    threads calling it at once could not share)."""
    encoder = json.JSONEncoder(
        separators=(",", ":"), ensure_ascii=ensure_ascii, allow_nan=allow_nan
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return encoder.encode
    strings = (
        json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    )
    chunks = make(None, encoder.default, strings, None, ":", ",", False, False, allow_nan)

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_flat_encode = acyclic_encoder(ensure_ascii=False, allow_nan=False)
_PLAIN = frozenset({str, int, bool, type(None)})


def encode_scalars(value: Any) -> str:
    """JSON of ``value``, whose types the caller checked (lists, tuples and str-keyed dicts of
    JSON scalars), in the form ``encode`` writes; ``ValueError`` for NaN, an infinity or an
    integer too long to write as text. The caller screens the text as ``_storable`` does."""
    return _encoder.encode(value)


def _is_flat(value: Any) -> bool:
    """True for the common case the walk need not inspect: a list or str-keyed dict of
    strings, ints, bools and None (exact types: subclasses may not round-trip)."""
    if type(value) is list:
        return all(type(item) in _PLAIN for item in value)
    if type(value) is dict:
        return all(type(k) is str and type(v) in _PLAIN for k, v in value.items())
    return type(value) in _PLAIN


def encode(value: Any, path: str, owner: str) -> str:
    """JSON-encode ``value`` or raise ``PayloadNotJSON`` naming the offending path."""
    if _is_flat(value):
        try:
            encoded = _flat_encode(value)  # no cycle in a flat value
        except ValueError:  # an integer too long to write as text: the walk below names it
            pass
        else:
            return _storable(encoded, value, path, owner)
    problem = find_non_json(value, path)
    if problem is not None:
        where, reason = problem
        raise PayloadNotJSON(
            f"{owner}: {where} {reason}. Job arguments and results are stored as JSON only."
        )
    try:
        encoded = _encoder.encode(value)
    except RecursionError:
        raise PayloadNotJSON(
            f"{owner}: {path} is nested too deeply to encode as JSON; flatten it."
        ) from None
    except ValueError as exc:  # anything the walk did not foresee still names its owner
        raise PayloadNotJSON(f"{owner}: {path} cannot be encoded as JSON ({exc}).") from None
    return _storable(encoded, value, path, owner)


def _too_long(number: int) -> bool:
    """Whether Python refuses to write ``number`` as text (``sys.set_int_max_str_digits``)."""
    try:
        int.__repr__(number)
    except ValueError:
        return True
    return False


def describe(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message: shortened, and safe for integers too long to
    write as text (whose repr raises)."""
    try:
        text = repr(value)
    except Exception:  # a huge integer, or an object whose __repr__ is broken
        if isinstance(value, int):
            return f"<an integer of {value.bit_length():,} bits>"
        return f"<a {type(value).__qualname__}>"
    return text if len(text) <= limit else f"{text[: limit - 5]}…{text[-4:]}"


def _storable(encoded: str, value: Any, path: str, owner: str) -> str:
    # Cheap screens on the encoded text; the walk runs only when one fires.
    if "\\u0000" in encoded or not encoded.isascii():
        reason = unstorable_text(value)
        if reason is not None:
            raise PayloadNotJSON(f"{owner}: a string in {path} {reason}.")
    return encoded


def storable_text(text: str) -> str:
    """``text`` made safe for any database: NUL (which PostgreSQL cannot store in text or
    jsonb) and lone surrogates (not UTF-8) become visible escapes."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def unstorable_text(value: Any) -> str | None:
    """The reason a string inside ``value`` cannot be stored, if one cannot."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "contains a NUL character (\\x00), which PostgreSQL cannot store"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "contains a lone surrogate, which is not valid UTF-8"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


def check_size(encoded_size: int, limit: int, what: str, setting: str) -> None:
    if encoded_size > limit:
        raise PayloadTooLarge(
            f"{what} {_size(encoded_size)}; the limit is {_size(limit)} "
            f"(WORKQUEUE[{setting!r}]). Store large data elsewhere and pass a reference."
        )


def _size(n: int) -> str:
    if n >= 1024:
        return f"{n / 1024:,.1f} KiB ({n:,} bytes)"
    return f"{n:,} bytes"
