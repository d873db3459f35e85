"""Errors in what was asked (config, flags, workdir) as one line; tracebacks for bugs.

The library raises ordinary `ValueError`s whose message names the config key to
change. Where such an error can only come from what the user asked for (the
config checks and data/model construction before training starts, a sweep's
expansion, a workdir that cannot be used), it is re-raised as `UserError` (still a
`ValueError`). The entry points run their `main` through `run`: a `UserError` (or
a non-finite loss, `FloatingPointError`) is printed as one line, `error: ...`, and
the process exits 1; anything else is a bug and keeps its traceback.
`RELPOS_TRACEBACK=1` shows the traceback of user errors too.

Two faults that are nobody's mistake also end in one line, each with its own
exit status (docs/training.md, "Exit codes"): a run stopped by SIGTERM/SIGINT
after saving a checkpoint (`Preempted`, exit 75: rerun the same command to
resume) and a write that failed (`WriteFailed`, exit 74: a full disk, a quota,
a read-only or vanished target; the previous checkpoint is intact).
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import re
import sys
from typing import Callable, Iterator

from absl import app
from absl import flags

TRACEBACK_ENV = "RELPOS_TRACEBACK"
# Exit statuses (docs/training.md): 1 and 74 follow sysexits' spirit, 75 is EX_TEMPFAIL
# ("temporary failure, the user is invited to retry"): a job script can requeue on it.
EXIT_USER_ERROR = 1
EXIT_WRITE_FAILED = 74
EXIT_PREEMPTED = 75
# What a failed write says when the OSError itself was wrapped (orbax, tensorstore).
_WRITE_CAUSES = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded",
                 errno.EROFS: "Read-only file system", errno.EACCES: "Permission denied",
                 errno.EIO: "Input/output error", errno.ENOENT: "No such file or directory"}


class UserError(ValueError):
  """A problem with the config, flags, data or workdir the user gave; its message says what to change."""


class Preempted(Exception):
  """Training stopped by a signal after saving a checkpoint at `step`; rerunning resumes there."""

  def __init__(self, step: int | None, signal_name: str):
    """`step` None: stopped before a run started training (nothing to save)."""
    super().__init__(
        f"stopped at step {step} by {signal_name}; checkpoint saved; rerun the same command to "
        "resume" if step is not None else
        f"stopped by {signal_name} before the next run started; rerun the same command to resume")
    self.step, self.signal_name = step, signal_name


class WriteFailed(Exception):
  """A file or checkpoint could not be written (full disk, quota, read-only); names it."""


def write_failure(error: BaseException, what: str, path: str,
                  advice: str = "") -> WriteFailed | None:
  """`error` as a one-line `WriteFailed` naming `what`, `path` and the cause, or None if not I/O.

  Args:
    error: what a write raised; an `OSError` anywhere in its cause/context chain,
      or a wrapped message naming an OS error (orbax and tensorstore re-raise
      them as other types), counts.
    what: what was being written ("checkpoint 20").
    path: where.
    advice: appended after the cause.

  Returns:
    The error to raise, or None when `error` is not a failed write (a bug: keep it).
  """
  cause, seen = None, error
  while seen is not None and cause is None:
    if isinstance(seen, OSError) and seen.errno is not None:
      code = errno.errorcode.get(seen.errno, seen.errno)
      cause = f"{seen.strerror or os.strerror(seen.errno)} [{code}]"
    seen = seen.__cause__ or seen.__context__
  if cause is None:
    text = str(error)
    for code, words in _WRITE_CAUSES.items():
      if words.lower() in text.lower():
        cause = f"{words} [{errno.errorcode[code]}]"
        break
  if cause is None:
    return None
  return WriteFailed(f"cannot write {what} to {path}: {cause}" + (f"; {advice}" if advice else ""))


def unknown_key_message(keys: list[str], key: str, what: str = "config key") -> str:
  """`unknown <what> 'a.b'; nearest valid keys: ...` (difflib over `keys`, else the siblings)."""
  keys = [k for k in keys if not key.startswith(k + ".")]  # its own parents are not a hint
  near = difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
  if not near:  # a wrong leaf under a right parent: list the parent's keys
    parent = key.rpartition(".")[0]
    near = [k for k in keys if k.rpartition(".")[0] == parent][:8]
  return f"unknown {what} {key!r}" + (f"; nearest valid keys: {', '.join(near)}" if near else "")


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


def _dotted_keys(node, prefix: str = "") -> list[str]:
  """Every key of a ConfigDict (or dict), dotted, parents before their children."""
  out = []
  for name in node.keys() if hasattr(node, "keys") else ():
    out.append(prefix + name)
    child = node[name]
    if hasattr(child, "keys"):
      out += _dotted_keys(child, f"{prefix}{name}.")
  return out


def _flag_value(argv: list[str], name: str) -> str | None:
  """The value given to `--name` in `argv` (`--name=v` or `--name v`), or None."""
  for i, arg in enumerate(argv):
    if arg in (f"--{name}", f"-{name}") and i + 1 < len(argv):
      return argv[i + 1]
    if arg.startswith((f"--{name}=", f"-{name}=")):
      return arg.split("=", 1)[1]
  return None


def _unknown_override(argv: list[str]) -> str | None:
  """The one-line message for a `--config.KEY=...` whose KEY the loaded config lacks, if any."""
  for arg in argv:
    m = re.match(r"--?(\w+)\.([\w.]+)(=|$)", arg)
    if not m or m.group(1) not in flags.FLAGS or not _flag_value(argv, m.group(1)):
      continue
    try:  # the config flag's own parser: loads the file and calls get_config(arg)
      config = flags.FLAGS[m.group(1)].parser.parse(_flag_value(argv, m.group(1)))
    except Exception:  # pylint: disable=broad-except  # the file itself is the problem: no hint
      return None
    keys = _dotted_keys(config)
    if m.group(2) not in keys:
      return f"{unknown_key_message(keys, m.group(2))} (in {arg})"
  return None


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with a flag or config-file error reported as one line."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    if os.environ.get(TRACEBACK_ENV):
      raise
    sys.stderr.write(f"error: {_one_line(str(e))}\n")
    sys.exit(EXIT_USER_ERROR)
  except (AttributeError, KeyError):
    # ml_collections reports `--config.no_such_key=1` as a bare AttributeError
    # from deep inside its parser; say which key, and what was probably meant.
    message = _unknown_override(argv)
    if message is None or os.environ.get(TRACEBACK_ENV):
      raise
    sys.stderr.write(f"error: {message}\n")
    sys.exit(EXIT_USER_ERROR)


def run(main: Callable[[list[str]], None]) -> None:
  """`app.run(main)`; user errors (exit 1), failed writes (74) and preemption (75) as one line."""

  def guarded(argv: list[str]) -> None:
    try:
      main(argv)
    except Preempted as e:  # not an error: a stop the scheduler asked for
      sys.stderr.write(f"{e}\n")
      sys.exit(EXIT_PREEMPTED)
    except (UserError, FloatingPointError, WriteFailed) as e:
      if os.environ.get(TRACEBACK_ENV):
        raise
      sys.stderr.write(f"error: {e}\n")
      sys.exit(EXIT_WRITE_FAILED if isinstance(e, WriteFailed) else EXIT_USER_ERROR)
    except OSError as e:  # a write no caller named (an eval report, a results file)
      if e.errno not in _WRITE_CAUSES or e.errno == errno.ENOENT or os.environ.get(TRACEBACK_ENV):
        raise
      where = e.filename or f"a write ({TRACEBACK_ENV}=1 shows where)"
      sys.stderr.write(f"error: {where}: {e.strerror} [{errno.errorcode[e.errno]}]\n")
      sys.exit(EXIT_WRITE_FAILED)

  app.run(guarded, flags_parser=_parse_flags)
