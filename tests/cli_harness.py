"""Runs the entry points (`train.py`, `eval.py`, `python -m ...`) as processes, cheaply.

A fresh `python train.py` spends about 5 s of CPU importing jax, flax, orbax, scipy and
matplotlib before it reads its first flag, and many of the suite's processes then fail at
a flag or train a few steps. `run` starts each case as a fork of one server process per
test worker that imported those libraries once, from the checkout (its root first on the
path, as `python train.py` there has it, not an installed copy), and never started a JAX
backend or a thread (it checks, and serves nothing otherwise: a fork copies one thread,
and `jax` warns that a fork after its backend started can deadlock). Each case is still a
process of its own: the script runs as `__main__` with its own argv, environment, working
directory, stdin (/dev/null), stdout, stderr and exit status, and exits as Python does
(atexit handlers, an uncaught exception's traceback, exit status 1).

A fresh interpreter is started instead (`subprocess.run`) when `fresh=True` (eval_main_test
keeps eval.py's cold start tested; train.py's is, by the runs that tests signal), for
`python -m module` (the server may have imported the module, which `runpy` would run a
second copy of), and when the case's environment differs from the test process's (which
the server imported with) in a variable that a library may read at import: anything but
the multi-process, device-count and traceback variables, which are read when the program
runs. The server is started again when the test process's own environment changes
(tensorboardX sets CRC32C_SW_MODE when it first writes an event file; conftest sets it up
front so that the suite's does not). Tests that signal a running process use
`subprocess.Popen` themselves.
"""

import ast
import importlib
import json
import os
import pathlib
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRY_POINTS = ("train.py", "eval.py")  # the server imports what these import
# Imported where a figure is drawn (relpos_jax/experiments/plots.py `new_figure`).
DRAWING_MODULES = ("matplotlib.figure", "matplotlib.backends.backend_agg", "matplotlib.lines",
                   "matplotlib.patches")
# Read when the program runs, not at import: a case may set them differently.
RUNTIME_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
                "JAX_LOCAL_DEVICE_IDS", "XLA_FLAGS", "RELPOS_TRACEBACK")
RUNTIME_PREFIXES = ("SLURM_",)
PYTEST_VARS = ("PYTEST_CURRENT_TEST",)  # pytest's own, set anew for every test

_server = None  # this test worker's server: (Popen, its environment)


def _import_time_env(env):
  """The variables of `env` that a library may read at import."""
  return {k: v for k, v in env.items()
          if k not in RUNTIME_VARS + PYTEST_VARS and not k.startswith(RUNTIME_PREFIXES)}


def _start_server():
  """The server process of this worker, started on first use and again if this process's
  environment has changed since (a library may set a variable while it runs)."""
  global _server
  if _server is not None and (_server[0].poll() is not None or
                              _import_time_env(_server[1]) != _import_time_env(os.environ)):
    close()
  if _server is None:
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, __file__], cwd=ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    _server = (proc, env)
  return _server


def close():
  """Stops this worker's server (conftest calls it at the end of the session)."""
  global _server
  if _server is not None:
    proc, _ = _server
    proc.stdin.close()
    proc.wait(timeout=60)
    _server = None


def run(args, *, env=None, cwd=ROOT, timeout=300, fresh=False):
  """`subprocess.run([python, *args], capture_output=True, text=True, ...)`, forked if it can be.

  Args:
    args: a script and its arguments (`["train.py", "--workdir", ...]`, relative to `cwd`)
      or `["-m", module, ...]`.
    env: the process's environment (default: this one's).
    cwd: its working directory.
    timeout: seconds before it is killed and `subprocess.TimeoutExpired` is raised.
    fresh: start a new interpreter even if a fork would do.

  Returns:
    The finished process (`returncode`, `stdout`, `stderr`).
  """
  args = [str(a) for a in args]
  env = dict(os.environ if env is None else env)
  # A module's package may be imported in the server already; a variable read at import
  # must be this process's, which the server imported with.
  if not fresh and args[0] != "-m" and _import_time_env(env) == _import_time_env(os.environ):
    proc, _ = _start_server()
    request = {"args": args, "env": env, "cwd": str(cwd), "timeout": timeout}
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:  # its traceback went to this worker's stderr
      close()
      raise RuntimeError(f"cli_harness: the fork server exited (status {proc.wait()}) "
                         f"before it answered {args}")
    reply = json.loads(line)
    if reply["timed_out"]:
      raise subprocess.TimeoutExpired(args, timeout, reply["stdout"], reply["stderr"])
    return subprocess.CompletedProcess([sys.executable, *args], reply["returncode"],
                                       reply["stdout"], reply["stderr"])
  return subprocess.run([sys.executable, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                        capture_output=True, text=True, timeout=timeout, check=False)


# ------------------------------------------------------------------ the server

def _entry_point_imports():
  """The modules the entry points import at their top (parsed, not imported)."""
  names = []
  for script in ENTRY_POINTS:
    for node in ast.parse((ROOT / script).read_text()).body:
      if isinstance(node, ast.Import):
        names += [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        names += [f"{node.module}.{a.name}" for a in node.names]
  return names


def _import_all():
  """Imports what the entry points import, and the modules they import to draw, from the
  checkout (as `python train.py` in it would: the repository's root first on the path, not
  an installed copy), then checks that nothing started what a fork cannot copy."""
  sys.path[0] = str(ROOT)  # was tests/, this file's folder
  for name in [*_entry_point_imports(), *DRAWING_MODULES]:
    try:
      importlib.import_module(name)
    except ModuleNotFoundError:  # `from package import attribute`
      importlib.import_module(name.rpartition(".")[0])
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
  if xla_bridge.backends_are_initialized() or threading.active_count() != 1:
    raise RuntimeError("cli_harness: an import started a JAX backend or a thread; a fork of "
                       "this process could deadlock, so it serves nothing")


def _child(request, out_path, err_path, reply_fd):
  """In the forked process: becomes `python *args` (never returns)."""
  os.close(reply_fd)  # the server's alone: the test process sees it close if the server dies
  os.chdir(request["cwd"])
  os.environ.clear()
  os.environ.update(request["env"])
  for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out_path, os.O_WRONLY),
                          (2, err_path, os.O_WRONLY)):
    opened = os.open(path, flags)
    os.dup2(opened, fd)
    os.close(opened)
  sys.argv = list(request["args"])
  script = os.path.abspath(sys.argv[0])  # `__main__.__file__` is absolute since Python 3.9
  sys.path[0] = os.path.dirname(script)  # as `python script.py` does
  runpy.run_path(script, run_name="__main__")
  sys.exit(0)  # the script returned: exit as Python does (atexit handlers, finalization)


def _wait(pid, timeout):
  """`(exit status as subprocess reports it, whether it was killed at the timeout)`."""
  deadline = time.monotonic() + timeout
  while True:
    done, raw = os.waitpid(pid, os.WNOHANG)
    if done:
      return os.waitstatus_to_exitcode(raw), False
    if time.monotonic() > deadline:
      os.kill(pid, signal.SIGKILL)
      return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), True
    time.sleep(0.005)


def _write_all(fd, data):
  """os.write until all of `data` is written (a pipe may take part of it)."""
  while data:
    data = data[os.write(fd, data):]


def _serve():
  """Answers each request line on stdin with the forked case's JSON result on stdout.

  The answers go to stdout's pipe alone: whatever a library prints goes to stderr. No
  `with` or `try` encloses the fork: a child unwinds through this function when its script
  raises or exits, and must not run the server's clean-up on the way.
  """
  reply_fd = os.dup(1)
  os.dup2(2, 1)
  _import_all()
  tmp = tempfile.mkdtemp(prefix="cli_harness")
  out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
  for line in sys.stdin:
    request = json.loads(line)
    for path in (out_path, err_path):
      open(path, "w").close()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      _child(request, out_path, err_path, reply_fd)  # never returns
    status, timed_out = _wait(pid, request["timeout"])
    reply = {"returncode": status, "timed_out": timed_out,
             "stdout": pathlib.Path(out_path).read_text(errors="replace"),
             "stderr": pathlib.Path(err_path).read_text(errors="replace")}
    _write_all(reply_fd, (json.dumps(reply) + "\n").encode())
  shutil.rmtree(tmp)


if __name__ == "__main__":
  _serve()
