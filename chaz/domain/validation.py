"""The input rules every producer call and every tool argument passes before the store.

Pure rules, no I/O: the producer API (:mod:`chaz.client`), the tools and the
domain models call them, so SQLite and PostgreSQL are never asked to judge
input. Each refusal is a :class:`~chaz.errors.ValidationError`
(``request.invalid``) naming the ``field``, or :class:`~chaz.errors.RequestTooLarge`
(``request.too_large``). Identifiers are checked with ``fullmatch``: ``$``
would let a trailing newline through.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

import pydantic
from pydantic import AfterValidator, BaseModel
from pydantic._internal._model_construction import ModelMetaclass

# Re-exported: defined in chaz.domain.checks (pydantic-free) since 2026-12-07.
from chaz.domain.checks import (
    _TOOL_NAME_RULE as _TOOL_NAME_RULE,
)
from chaz.domain.checks import (
    AGENT_ID as AGENT_ID,
)
from chaz.domain.checks import (
    COMMAND_ID_CHARS as COMMAND_ID_CHARS,
)
from chaz.domain.checks import (
    DEFAULT_MAX_CONTENT_BYTES as DEFAULT_MAX_CONTENT_BYTES,
)
from chaz.domain.checks import (
    IDEMPOTENCY_KEY_CHARS as IDEMPOTENCY_KEY_CHARS,
)
from chaz.domain.checks import (
    MAX_JSON_DEPTH as MAX_JSON_DEPTH,
)
from chaz.domain.checks import (
    MAX_LIMIT as MAX_LIMIT,
)
from chaz.domain.checks import (
    MAX_SEQ as MAX_SEQ,
)
from chaz.domain.checks import (
    MAX_TIMEOUT as MAX_TIMEOUT,
)
from chaz.domain.checks import (
    SESSION_NAME as SESSION_NAME,
)
from chaz.domain.checks import (
    TOOL_NAME as TOOL_NAME,
)
from chaz.domain.checks import (
    bad_character as bad_character,
)
from chaz.domain.checks import (
    check_agent_id as check_agent_id,
)
from chaz.domain.checks import (
    check_choice as check_choice,
)
from chaz.domain.checks import (
    check_command_id as check_command_id,
)
from chaz.domain.checks import (
    check_content as check_content,
)
from chaz.domain.checks import (
    check_entry_type as check_entry_type,
)
from chaz.domain.checks import (
    check_flag as check_flag,
)
from chaz.domain.checks import (
    check_idempotency_key as check_idempotency_key,
)
from chaz.domain.checks import (
    check_int as check_int,
)
from chaz.domain.checks import (
    check_json as check_json,
)
from chaz.domain.checks import (
    check_limit as check_limit,
)
from chaz.domain.checks import (
    check_optional_text as check_optional_text,
)
from chaz.domain.checks import (
    check_ref as check_ref,
)
from chaz.domain.checks import (
    check_seconds as check_seconds,
)
from chaz.domain.checks import (
    check_session_name as check_session_name,
)
from chaz.domain.checks import (
    check_text as check_text,
)
from chaz.domain.checks import (
    check_tool_name as check_tool_name,
)
from chaz.domain.checks import (
    invalid as invalid,
)
from chaz.domain.checks import (
    is_blank as is_blank,
)
from chaz.domain.checks import (
    sanitized as sanitized,
)
from chaz.domain.checks import (
    truncated as truncated,
)
from chaz.domain.checks import (
    truncated_size as truncated_size,
)
from chaz.domain.checks import (
    utf8_size as utf8_size,
)
from chaz.errors import ValidationError

# -- for pydantic models --------------------------------------------------------


def _safe_text(value: str) -> str:
    problem = bad_character(value)
    if problem:
        raise ValueError(f"contains {problem}")
    return value


def _safe_json(value: dict[str, Any]) -> dict[str, Any]:
    try:
        return check_json("value", value)
    except ValidationError as exc:
        raise ValueError(exc.message.removeprefix("value ")) from None


def _tool_name(value: str) -> str:
    if not TOOL_NAME.fullmatch(value):
        raise ValueError(_TOOL_NAME_RULE)
    return value


#: A string field that the database can store (no NUL, no lone surrogate).
SafeText = Annotated[str, AfterValidator(_safe_text)]
#: A JSON-object field that the database can store as given.
SafeJson = Annotated[dict[str, Any], AfterValidator(_safe_json)]
#: A tool name field.
ToolName = Annotated[str, AfterValidator(_tool_name)]


class _Checking(ModelMetaclass):
    """Turns pydantic's error into chaz's when a model is called, and only then.

    Only ``Model(...)`` goes through the metaclass: ``model_validate`` and a
    model nested in another keep pydantic's behaviour (and its full field
    paths), which a custom ``__init__`` would change.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except pydantic.ValidationError as exc:
            raise ValidationError.from_pydantic(exc, model=cls.__name__) from None


class CheckedModel(BaseModel, metaclass=_Checking):
    """A pydantic model whose constructor raises chaz's ``request.invalid``.

    ``Model(**fields)`` and :meth:`parse` raise
    :class:`chaz.errors.ValidationError` naming the refused ``field``;
    pydantic's own ``model_validate`` keeps pydantic's ``ValidationError`` (a
    ``ValueError``), so code written against pydantic still works.
    """

    @classmethod
    def parse(cls, data: object, field: str = "") -> Self:
        """Validate ``data`` (a mapping or an instance) into this model, chaz's way.

        ``field`` is the argument ``data`` came in as: refused fields are
        named under it (``limits.max_turn_steps``).
        """
        if isinstance(data, cls):
            return data
        try:
            return cls.model_validate(data)
        except pydantic.ValidationError as exc:
            raise ValidationError.from_pydantic(exc, model=cls.__name__, prefix=field) from None
        except RecursionError:
            raise invalid(field or cls.__name__, f"{cls.__name__} is nested too deeply") from None
