"""The ``chaz`` command line.

Every command is a thin layer over the producer API (:class:`chaz.Client`) or
over the embedded stack (:func:`chaz.embedded`), so what the CLI does a program
can do too. Output adapts to where it goes:

* on a terminal: rich tables, a coloured timeline and spinners while waiting;
* into a pipe or a file: plain, column-aligned text with no colour;
* with ``--json`` (accepted before or after the subcommand): JSON documents,
  and one JSON object per line for the commands that stream entries
  (``demo``, ``tail``).

Exit codes: 0 success; 1 a failure (an Error entry, a timeout, an unreachable
backend, a conflict); 2 a bad request (invalid input, an unknown id, a usage
error); 130 interrupted by Ctrl-C. A :class:`~chaz.errors.ChazError` is
reported as ``error [code]: message`` on stderr, never as a traceback.
"""

from chaz.cli.main import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
