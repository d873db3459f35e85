"""Errors in what was asked (config, flags, workdir) as one line; tracebacks for bugs.

The library raises ordinary `ValueError`s whose message names the config key to
change. Where such an error can only come from what the user asked for (the
config checks and data/model construction before training starts, a sweep's
expansion, a workdir that cannot be used), it is re-raised as `UserError` (still a
`ValueError`). The entry points run their `main` through `run`: a `UserError` (or
a non-finite loss, `FloatingPointError`) is printed as one line, `error: ...`, and
the process exits 1; anything else is a bug and keeps its traceback.
`RELPOS_TRACEBACK=1` shows the traceback of user errors too.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator

from absl import app
from absl import flags

TRACEBACK_ENV = "RELPOS_TRACEBACK"


class UserError(ValueError):
  """A problem with the config, flags, data or workdir the user gave; its message says what to change."""


@contextlib.contextmanager
def user_errors(*kinds: type[BaseException]) -> Iterator[None]:
  """Re-raises `ValueError`/`TypeError`/`FileNotFoundError` (or `kinds`) inside as `UserError`."""
  kinds = kinds or (ValueError, TypeError, FileNotFoundError)
  try:
    yield
  except UserError:
    raise
  except kinds as e:
    raise UserError(str(e)) from e


def _one_line(message: str) -> str:
  """The message of an error that absl or config_flags wrapped around a traceback."""
  lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
  if "Traceback (most recent call last)" in message:
    head = lines[0].split(": Error whilst parsing config file")[0]
    last = lines[-1]
    return f"{head}: {last.split(': ', 1)[-1] if ': ' in last else last}"
  return " ".join(lines)


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with a flag or config-file error reported as one line."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    if os.environ.get(TRACEBACK_ENV):
      raise
    sys.stderr.write(f"error: {_one_line(str(e))}\n")
    sys.exit(1)


def run(main: Callable[[list[str]], None]) -> None:
  """`app.run(main)`, with user errors reported as one line and exit status 1."""

  def guarded(argv: list[str]) -> None:
    try:
      main(argv)
    except (UserError, FloatingPointError) as e:
      if os.environ.get(TRACEBACK_ENV):
        raise
      sys.stderr.write(f"error: {e}\n")
      sys.exit(1)

  app.run(guarded, flags_parser=_parse_flags)
