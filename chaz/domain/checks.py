"""The input rules as plain functions: what :mod:`chaz.domain.validation` checks,
without pydantic.

:mod:`chaz.domain.validation` re-exports every name here beside its pydantic
types (``CheckedModel``, ``SafeText``); code that checks arguments without
building a model, such as the read commands' fast path (:mod:`chaz.cli.direct`),
imports this module and no pydantic
(docs/performance.md#cli-read-commands-on-postgresql).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from chaz.domain.kinds import NEEDS_CONTENT, RUNTIME_ONLY, EntryType
from chaz.errors import RequestTooLarge, ValidationError

E = TypeVar("E", bound=StrEnum)

#: 1-64 letters, digits, ``_ . -``.
AGENT_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
#: A built-in tool's name, what model APIs accept as a function name (1-64
#: letters, digits, ``_ -``), or an MCP tool's ``SERVER.TOOL`` (docs/tools.md):
#: a server name of 1-32 of those, a dot, the server's tool name of 1-64 (``.`` too).
TOOL_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}|[A-Za-z0-9_\-]{1,32}\.[A-Za-z0-9_.\-]{1,64}")
_TOOL_NAME_RULE = (
    "a tool name has 1-64 characters: letters, digits, _ - (an MCP tool's: SERVER.TOOL)"
)
#: 1-255 characters (after surrounding spaces are stripped), none of them a control character.
SESSION_NAME = re.compile(r"[^\x00-\x1f\x7f-\x9f\ud800-\udfff]{1,255}")

#: Column widths: a longer value would be refused by PostgreSQL and kept by SQLite.
IDEMPOTENCY_KEY_CHARS = 200
COMMAND_ID_CHARS = 100
#: The most rows one listing may ask for.
MAX_LIMIT = 10_000
#: ``seq`` and ``ordinal`` are 32-bit integers in the database.
MAX_SEQ = 2**31 - 1
#: The longest a producer call may wait (a day).
MAX_TIMEOUT = 86_400.0
#: Nesting depth of metadata and options; deeper is refused before a parser recurses.
MAX_JSON_DEPTH = 32
#: Default of ``CHAZ_MAX_CONTENT_BYTES``.
DEFAULT_MAX_CONTENT_BYTES = 1 << 20

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# A JSON escape of NUL that is not itself an escaped backslash followed by "u0000".
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def invalid(field: str, message: str, **details: Any) -> ValidationError:
    """A ``request.invalid`` error about ``field``."""
    return ValidationError(message, field=field, **details)


def bad_character(value: str) -> str | None:
    """What makes ``value`` unstorable (a NUL or a lone surrogate), or None."""
    if "\x00" in value:
        return "a NUL character"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate (not valid Unicode)"
    return None


def utf8_size(value: str, cap: int) -> int:
    """The UTF-8 size of ``value``, computed only when it could exceed ``cap``."""
    if len(value) * 4 <= cap:
        return len(value)
    return len(value.encode("utf-8", "surrogatepass"))


def check_text(
    field: str,
    value: object,
    *,
    max_chars: int | None = None,
    max_bytes: int | None = None,
) -> str:
    """A storable string: not None, no NUL, no lone surrogate, within its limits."""
    if value is None:
        raise invalid(field, f"{field} is required")
    if not isinstance(value, str):
        raise invalid(field, f"{field} must be a string, not {type(value).__name__}")
    problem = bad_character(value)
    if problem:
        raise invalid(field, f"{field} contains {problem}")
    if max_chars is not None and len(value) > max_chars:
        raise invalid(field, f"{field} is longer than {max_chars} characters", max=max_chars)
    if max_bytes is not None and len(value) > 0 and utf8_size(value, max_bytes) > max_bytes:
        raise RequestTooLarge(
            f"{field} is larger than {max_bytes} bytes (CHAZ_MAX_CONTENT_BYTES)",
            field=field,
            max_bytes=max_bytes,
        )
    return value


def check_content(type: EntryType, value: object, *, max_bytes: int) -> str:
    """An entry's content: storable, at most ``max_bytes``, and not blank where
    the type needs words (:data:`~chaz.domain.entries.NEEDS_CONTENT`)."""
    text = check_text("content", value, max_bytes=max_bytes)
    if type in NEEDS_CONTENT and is_blank(text):
        raise invalid("content", f"the content of a {type.value} may not be empty or blank")
    return text


def check_choice(field: str, value: object, kind: type[E], what: str) -> E:
    """A member of the string enum ``kind``, by value (``what`` names it in the error)."""
    try:
        if isinstance(value, str):
            return kind(value)
    except ValueError:
        pass
    raise invalid(field, f"unknown {what} {repr(value)[:80]}; one of {[m.value for m in kind]}")


def check_entry_type(value: object) -> EntryType:
    """An entry type a producer may write, by value (not one only chaz writes)."""
    etype = check_choice("type", value, EntryType, "entry type")
    if etype in RUNTIME_ONLY:
        raise invalid("type", f"entries of type {etype.value!r} are written by chaz only")
    return etype


def check_idempotency_key(value: object) -> str | None:
    """None, or 1 to :data:`IDEMPOTENCY_KEY_CHARS` storable characters."""
    return _check_key("idempotency_key", value, IDEMPOTENCY_KEY_CHARS)


def check_command_id(value: object) -> str | None:
    """None, or 1 to :data:`COMMAND_ID_CHARS` storable characters."""
    return _check_key("command_id", value, COMMAND_ID_CHARS)


def _check_key(field: str, value: object, max_chars: int) -> str | None:
    if value is None:
        return None
    key = check_text(field, value, max_chars=max_chars)
    if not key:
        raise invalid(field, f"{field} may not be empty")
    return key


def sanitized(value: str) -> str:
    """``value`` with every NUL and lone surrogate replaced by U+FFFD."""
    if bad_character(value) is None:
        return value
    return _UNSTORABLE.sub("\ufffd", value)


def truncated(value: str, max_bytes: int) -> tuple[str, bool]:
    """``value`` cut to at most ``max_bytes`` UTF-8 bytes, with a note saying so."""
    if utf8_size(value, max_bytes) <= max_bytes:
        return value, False
    data = value.encode("utf-8")
    note = (
        f"\n[... truncated: {len(data)} bytes in all; "
        f"only the first part fits in CHAZ_MAX_CONTENT_BYTES={max_bytes} ...]"
    )
    keep = max_bytes - len(note.encode("utf-8"))
    if keep <= 0:  # a cap smaller than the note: the bytes alone
        return data[:max_bytes].decode("utf-8", "ignore"), True
    return data[:keep].decode("utf-8", "ignore") + note, True


_TRUNCATION_NOTE = re.compile(
    r"\n\[\.\.\. truncated: (\d+) bytes in all; "
    r"only the first part fits in CHAZ_MAX_CONTENT_BYTES=\d+ \.\.\.\]\Z"
)


def truncated_size(value: str) -> int | None:
    """The whole size in bytes of a value :func:`truncated` cut, None if it was not cut."""
    found = _TRUNCATION_NOTE.search(value)
    return int(found.group(1)) if found else None


def check_optional_text(field: str, value: object, *, max_chars: int | None = None) -> str | None:
    """:func:`check_text`, with None allowed."""
    return None if value is None else check_text(field, value, max_chars=max_chars)


def is_blank(value: str) -> bool:
    """Empty or whitespace only."""
    return not value or value.isspace()


def check_json(field: str, value: object, *, max_bytes: int | None = None) -> dict[str, Any]:
    """A JSON object the database stores as given: finite numbers, storable strings.

    None is ``{}``. Non-string keys are allowed where JSON turns them into
    strings; anything ``json`` cannot write (NaN, Infinity, objects, cycles,
    integers too long to print) is refused, as is nesting deeper than
    :data:`MAX_JSON_DEPTH`.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise invalid(field, f"{field} must be a JSON object, not {type(value).__name__}")
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except RecursionError:
        raise invalid(field, f"{field} is nested too deeply") from None
    except (ValueError, TypeError) as exc:
        raise invalid(field, f"{field} is not JSON: {exc}") from None
    if (text.count("[") + text.count("{")) > MAX_JSON_DEPTH and _depth(text) > MAX_JSON_DEPTH:
        raise invalid(field, f"{field} is nested deeper than {MAX_JSON_DEPTH} levels")
    if _JSON_NUL.search(text):
        raise invalid(field, f"{field} contains a NUL character")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise invalid(field, f"{field} contains a lone surrogate (not valid Unicode)") from None
    if max_bytes is not None and size > max_bytes:
        raise RequestTooLarge(
            f"{field} is larger than {max_bytes} bytes as JSON (CHAZ_MAX_CONTENT_BYTES)",
            field=field,
            max_bytes=max_bytes,
        )
    return dict(value)


def _depth(text: str) -> int:
    """Bracket nesting of JSON text, outside its strings."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def check_int(field: str, value: object, *, low: int, high: int) -> int:
    """An integer (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(field, f"{field} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise invalid(field, f"{field} must be between {low} and {high}", min=low, max=high)
    return int(value)


def check_limit(field: str, value: object) -> int:
    """A listing's ``limit``: 1 to :data:`MAX_LIMIT`."""
    return check_int(field, value, low=1, high=MAX_LIMIT)


def check_seconds(field: str, value: object) -> float:
    """A finite, non-negative wait of at most :data:`MAX_TIMEOUT` seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(field, f"{field} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or not 0 <= value <= MAX_TIMEOUT:
        raise invalid(field, f"{field} must be between 0 and {MAX_TIMEOUT:g} seconds")
    return float(value)


def check_agent_id(value: object, field: str = "agent_id") -> str:
    """An agent id (:data:`AGENT_ID`)."""
    if not isinstance(value, str) or not AGENT_ID.fullmatch(value):
        raise invalid(field, "an agent id has 1-64 characters: letters, digits, _ . -")
    return value


def check_tool_name(value: object, field: str = "tool") -> str:
    """A tool name (:data:`TOOL_NAME`)."""
    if not isinstance(value, str) or not TOOL_NAME.fullmatch(value):
        raise invalid(field, _TOOL_NAME_RULE)
    return value


def check_session_name(value: object, field: str = "name") -> str:
    """A session name, stripped of surrounding spaces (:data:`SESSION_NAME`)."""
    if not isinstance(value, str):
        raise invalid(field, f"{field} must be a string")
    name = value.strip(" ")
    if not SESSION_NAME.fullmatch(name) or name.isspace():
        raise invalid(
            field, "a session name has 1-255 characters, none of them a control character"
        )
    return name


def check_flag(field: str, value: object) -> bool:
    """A yes/no argument: ``True`` or ``False`` only (``"no"`` is truthy, so a
    string or a number is refused rather than guessed at)."""
    if not isinstance(value, bool):
        raise invalid(field, f"{field} must be true or false")
    return value


def check_ref(field: str, value: object) -> str:
    """An id or name used to look something up: a storable string.

    Its length is not checked: a longer one matches nothing and is not found.
    """
    return check_text(field, value)
