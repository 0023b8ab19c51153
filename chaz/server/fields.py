"""Request bodies and queries, checked: every field is either implemented or
refused with ``request.unsupported`` naming it, never silently dropped
(docs/http.md#unsupported)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chaz.errors import Unsupported, ValidationError

#: Values a client sends when it means "the default": accepted for any field.
_DEFAULTS: tuple[object, ...] = (None, False, [], {})


def body(raw: object) -> dict[str, Any]:
    """A JSON body that is an object (an empty body is ``{}``)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValidationError("the request body must be a JSON object", field="body")
    return raw


def refuse_unknown(
    given: Mapping[str, Any],
    known: Iterable[str],
    *,
    defaults: Mapping[str, Iterable[object]] | None = None,
    prefix: str = "",
) -> None:
    """Refuse the first field of ``given`` that is not ``known`` and holds more
    than a default: ``request.unsupported`` naming it (``prefix`` + its name).

    ``defaults``: per field, the further values that mean "as chaz does
    anyway" (``multitask_strategy: "enqueue"``), also accepted."""
    allowed = set(known)
    extra = defaults or {}
    for name, value in given.items():
        if name in allowed or _is_default(value, extra.get(name, ())):
            continue
        raise Unsupported(
            f"{prefix}{name} is not supported by chaz (yet): leave it out (docs/http.md)",
            field=f"{prefix}{name}",
        )


def _is_default(value: object, further: Iterable[object]) -> bool:
    return any(value == d and type(value) is type(d) for d in (*_DEFAULTS, *further))


def choice(given: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    """A field that is one of ``allowed`` (``default`` when absent)."""
    value = given.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or value not in allowed:
        raise ValidationError(f"{name} must be one of {', '.join(allowed)}", field=name)
    return value


def integer(given: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    """A whole number field between ``low`` and ``high`` (``default`` when absent)."""
    value = given.get(name, default)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name} must be a whole number from {low} to {high}", field=name)
    return value


def stream_modes(raw: object) -> tuple[str, ...]:
    """``stream_mode``: one mode or a list of them (default ``values``)."""
    if raw is None:
        return ("values",)
    modes = [raw] if isinstance(raw, str) else raw
    if not isinstance(modes, list) or not modes or not all(isinstance(m, str) for m in modes):
        raise ValidationError("stream_mode must be a mode or a list of modes", field="stream_mode")
    for mode in modes:
        if mode not in STREAM_MODES:
            raise Unsupported(
                f"stream_mode {mode!r} is not supported by chaz (yet): use "
                + " or ".join(STREAM_MODES),
                field="stream_mode",
            )
    return tuple(dict.fromkeys(modes))


#: The stream modes chaz implements.
#: ``custom`` is accepted and sends nothing: chaz has no custom writer (docs/http.md#streams).
STREAM_MODES = ("values", "updates", "messages-tuple", "events", "custom")


def input_text(raw: object) -> str:
    """The text of a run's input: one message, ``{"messages": [{"role": "user",
    "content": ...}]}``, whose content is text or a list of text blocks."""
    if not isinstance(raw, dict):
        raise ValidationError("input must be an object with messages", field="input")
    refuse_unknown(raw, ("messages",), prefix="input.")
    messages = raw.get("messages")
    if not isinstance(messages, list) or len(messages) != 1 or not isinstance(messages[0], dict):
        raise Unsupported(
            "input.messages must hold exactly one message (one write per run)",
            field="input.messages",
        )
    msg = messages[0]
    refuse_unknown(msg, ("role", "type", "content", "id"), prefix="input.messages.0.")
    role = msg.get("role", msg.get("type", "user"))
    if role not in ("user", "human"):
        raise Unsupported(
            "input.messages.0.role must be user or human: chaz writes the agent's own messages",
            field="input.messages.0.role",
        )
    return _text(msg.get("content"))


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        parts = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "text":
                raise Unsupported(
                    "only text content blocks are supported",
                    field="input.messages.0.content",
                )
            refuse_unknown(block, ("type", "text", "id"), prefix="input.messages.0.content.")
            text = block.get("text")
            if not isinstance(text, str):
                raise ValidationError(
                    "a text block's text must be a string", field="input.messages.0.content"
                )
            parts.append(text)
        return "".join(parts)
    raise ValidationError(
        "a message's content must be text or a list of text blocks",
        field="input.messages.0.content",
    )
