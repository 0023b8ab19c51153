"""``python -m workers worker [OPTIONS]``: ``celery -A workers worker``, started lean.

The ``celery`` command imports every plugin registered for it before it
parses a word (Flower with Tornado, click-repl with prompt-toolkit, the
``amqp`` shell): about 0.3 s of a worker's start, more under load, that a
worker never uses (docs/performance.md#worker-start-up). This entry runs
Celery's own ``worker`` command, its options, conversions and defaults
unchanged, on chaz's app, without loading the others (nor the pygments
lexer Celery's command-line module builds for the others' output).
Anything but ``worker`` goes to the full ``celery`` command.

Exec'd by ``chaz worker`` with settings it did not check, it checks them
first, as the command would have (``chaz.cli.worker.check_worker_settings``).

The garbage collector, paused while Python locates this module (the
package's import, :func:`workers.pause_collection`), resumes when Celery
sends ``worker_init``: the tasks and everything a turn needs are imported by
then, and are frozen out of later collections.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from chaz.errors import ChazError


def main(argv: list[str] | None = None) -> None:
    """Run Celery's ``worker`` command on :data:`workers.app` (exits with its code)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["worker"]:
        from celery.bin.celery import main as celery_main

        sys.argv = ["celery", "-A", "workers", *args]
        celery_main()
        return
    # chaz.cli.worker.CHECK_SETTINGS_ENV: the settings are this process's to check.
    check = os.environ.pop("_CHAZ_WORKER_CHECK_SETTINGS", None)
    if check is not None:
        _check_settings(check)
    from celery import maybe_patch_concurrency

    # As the celery command does first: an eventlet or gevent pool patches
    # the standard library before anything else imports it.
    maybe_patch_concurrency(["celery", *args])
    _import_without_highlighting()
    from celery.bin.base import CLIContext
    from celery.bin.worker import worker
    from celery.signals import worker_init

    from workers.app import app

    # Celery sends worker_init once it has imported the tasks (and with them
    # the store and the turn's code), before it connects to the broker.
    worker_init.connect(_resume_collection, weak=False)

    # What the ``celery`` group does before it calls ``worker``: the app's
    # own worker options (chaz declares none), then the context object.
    worker.params.extend(app.user_options.get("worker", []))
    worker.main(
        args=args[1:],
        prog_name="celery -A workers worker",
        obj=CLIContext(app=app, no_color=None, workdir=None, quiet=False),
    )


def _resume_collection(**_: object) -> None:
    """End the start's pause of the garbage collector (:func:`workers.resume_collection`)."""
    from workers import resume_collection

    resume_collection()


def _import_without_highlighting() -> None:
    """Import ``celery.bin.base`` as if pygments were not installed.

    When pygments is importable, that module builds a Python lexer and a
    256-colour formatter as it is imported, to colour the replies of
    ``celery inspect`` and ``celery call``: a few hundredths of a second of
    every worker's start (docs/performance.md#worker-start-up) for output
    the ``worker`` command never prints. Hidden for this one import, Celery
    takes its own fallback (no colour); pygments stays importable for
    anything after.
    """
    if "celery.bin.base" in sys.modules or "pygments" in sys.modules:
        return
    sys.modules["pygments"] = None  # type: ignore[assignment]  # import fails: Celery's fallback
    try:
        import celery.bin.base  # noqa: F401
    finally:
        del sys.modules["pygments"]


def _check_settings(spec: str) -> None:
    """Build the settings (which the worker then uses) before Celery starts and,
    when ``spec`` says so, bring the schema up to date; end the start on a
    refused setting or a failure as ``chaz worker`` would have: its words, its
    output mode and exit status (``spec``: chaz.cli.worker.CHECK_SETTINGS_ENV)."""
    import pydantic

    from chaz.errors import ConfigError, validation_message

    mode, usage, failure, migrate = spec.split(":")
    try:
        from chaz.settings import get_settings

        settings = get_settings()
    except pydantic.ValidationError as exc:
        _fail(ConfigError(f"invalid settings: {validation_message(exc)}"), mode, usage, failure)
    if migrate:
        from chaz.store.migrate import ensure_current

        try:
            ensure_current(settings.effective_database_url())
        except Exception as exc:
            from chaz.errors import from_exception

            _fail(from_exception(exc), mode, usage, failure)


def _fail(err: ChazError, mode: str, usage: str, failure: str) -> NoReturn:
    """Report ``err`` as the CLI does (chaz.errors.write_failure) and exit."""
    from chaz.errors import refuses_as_written, write_failure

    console = None
    if mode == "fancy":
        from rich.console import Console

        console = Console(stderr=True, highlight=False)
    json_mode = mode == "json"
    write_failure(err.code, err.message, err.to_dict(), json_mode=json_mode, console=console)
    sys.exit(int(usage if refuses_as_written(err) else failure))


if __name__ == "__main__":
    main()
