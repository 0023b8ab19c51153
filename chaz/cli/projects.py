"""``chaz projects``: each project's quotas and their use (docs/security.md#project-quotas)."""

from __future__ import annotations

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.domain.projects import Project
from chaz.errors import ValidationError

#: What ``--max-live`` / ``--max-jobs`` accept besides a number.
DEFAULT = "default"
UNLIMITED = ("none", "unlimited")


#: The limits `chaz projects set` sets, each kept unless given.
LIMITS = (
    "max_live",
    "max_jobs",
    "turns_per_minute",
    "tokens_per_minute",
    "max_tokens",
    "max_cost",
)


def _limit(stored: float | None, effective: float | None) -> str:
    shown = "unlimited" if effective is None else str(effective)
    return f"{shown} (default)" if stored is None else shown


def parse_limit(field: str, value: str) -> int | None:
    """A limit as typed: a number, ``-1``/``none``/``unlimited`` (no limit) or
    ``default`` (None: the install's default)."""
    text = value.strip().lower()
    if text == DEFAULT:
        return None
    if text in UNLIMITED:
        return -1
    try:
        return int(text)
    except ValueError:
        raise ValidationError(
            f"--{field.replace('_', '-')} takes a number, -1 or 'unlimited', or 'default'",
            field=field,
        ) from None


def _print(ctx: Context, p: Project) -> int:
    if ctx.out.json_mode:
        ctx.out.json(p.model_dump(mode="json"))
    else:
        ctx.out.line(
            f"project {p.id}: live {p.live} of {_limit(p.max_live, p.effective_max_live)}, "
            f"jobs {p.jobs} of {_limit(p.max_jobs, p.effective_max_jobs)}, "
            f"{_limit(p.turns_per_minute, p.effective_turns_per_minute)} turns a minute, "
            f"{_limit(p.tokens_per_minute, p.effective_tokens_per_minute)} tokens a minute, "
            f"tokens in all {_limit(p.max_tokens, p.effective_max_tokens)}, "
            f"cost in all {_limit(p.max_cost, p.effective_max_cost)}"
        )
    return EXIT_OK


def cmd_projects_ls(ctx: Context) -> int:
    """List projects (with limits or sessions), their limits and their use."""
    found = ctx.client.projects.list()
    if ctx.out.json_mode:
        ctx.out.json([p.model_dump(mode="json") for p in found])
        return EXIT_OK
    rows = [
        [
            p.id,
            p.live,
            _limit(p.max_live, p.effective_max_live),
            p.jobs,
            _limit(p.max_jobs, p.effective_max_jobs),
            _limit(p.turns_per_minute, p.effective_turns_per_minute),
            _limit(p.tokens_per_minute, p.effective_tokens_per_minute),
        ]
        for p in found
    ]
    headers = ["PROJECT", "LIVE", "MAX LIVE", "JOBS", "MAX JOBS", "TURNS/MIN", "TOKENS/MIN"]
    ctx.out.table("projects", headers, rows)
    return EXIT_OK


def cmd_projects_set(ctx: Context) -> int:
    """Set a project's limits; an option left out keeps its current value."""
    a = ctx.args
    projects = ctx.client.projects
    given = {name: getattr(a, name) for name in LIMITS if getattr(a, name) is not None}
    limits: dict[str, float | None] = {
        name: (parse_cost if name == "max_cost" else parse_limit)(name, value)
        for name, value in given.items()
    }
    if len(limits) < len(LIMITS):
        current = projects.get(a.project)
        for name in LIMITS:
            limits.setdefault(name, getattr(current, name))
    return _print(ctx, projects.set_limits(a.project, **limits))  # type: ignore[arg-type]


def parse_cost(field: str, value: str) -> float | None:
    """A cost budget as typed: a number, ``-1``/``none``/``unlimited`` or ``default``."""
    text = value.strip().lower()
    if text == DEFAULT:
        return None
    if text in UNLIMITED:
        return -1.0
    try:
        return float(text)
    except ValueError:
        raise ValidationError(
            f"--{field.replace('_', '-')} takes a number, -1 or 'unlimited', or 'default'",
            field=field,
        ) from None
