"""cli_harness forks a case only where the fork behaves as a fresh `python script.py` would."""

import json
import os
import pathlib
import subprocess

import pytest

import cli_harness  # pytest puts tests/ on the path

pytestmark = pytest.mark.slow  # starts processes (the fork server imports jax and the rest)

SCRIPT = """
import json, os, sys
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                  "main": __name__, "file": __file__, "var": os.environ.get("RELPOS_TRACEBACK"),
                  "stdin": sys.stdin.read(), "parent": os.getppid()}))
sys.stderr.write("to stderr\\n")
if sys.argv[1] == "exit":
  sys.exit(int(sys.argv[2]))
if sys.argv[1] == "raise":
  raise KeyError("raised")
"""
ATEXIT_SCRIPT = """
import atexit, sys
atexit.register(lambda: print("atexit ran"))
sys.exit(0)
"""


@pytest.fixture
def script(tmp_path):
  path = tmp_path / "probe.py"
  path.write_text(SCRIPT)
  return path


def _both(args, **kwargs):
  """(forked, fresh) runs of the same case."""
  return cli_harness.run(args, **kwargs), cli_harness.run(args, fresh=True, **kwargs)


@pytest.mark.parametrize("args, returncode", [(["ok"], 0), (["exit", "3"], 3),
                                              (["raise"], 1)])
def test_a_forked_case_is_a_fresh_process_but_for_its_parent(script, tmp_path, args, returncode):
  env = {**os.environ, "RELPOS_TRACEBACK": "x"}  # read when the program runs: forkable
  forked, fresh = _both([script, *args], env=env, cwd=tmp_path)
  for proc in (forked, fresh):
    assert proc.returncode == returncode, proc.stderr
    assert proc.stderr.startswith("to stderr\n")
  assert ("KeyError: 'raised'" in forked.stderr) == ("KeyError: 'raised'" in fresh.stderr) == (
      args == ["raise"])
  if args == ["raise"]:
    assert "Traceback (most recent call last)" in forked.stderr
  seen = [json.loads(proc.stdout) for proc in (forked, fresh)]
  assert seen[0]["parent"] != os.getpid() and seen[1]["parent"] == os.getpid()  # the server's
  for s in seen:
    del s["parent"]
  assert seen[0] == seen[1]
  assert seen[0] == {"argv": [str(script), *args], "cwd": str(tmp_path),
                     "path0": str(script.parent), "main": "__main__", "file": str(script),
                     "var": "x", "stdin": ""}


def test_atexit_handlers_run_in_a_forked_case(tmp_path):
  path = tmp_path / "atexit_probe.py"
  path.write_text(ATEXIT_SCRIPT)
  forked, fresh = _both([path])
  assert forked.stdout == fresh.stdout == "atexit ran\n"


def test_an_import_time_variable_or_a_module_starts_a_fresh_interpreter(script):
  changed = {**os.environ, "JAX_ENABLE_X64": "1"}  # jax reads it at import: never forked
  proc = cli_harness.run([script, "ok"], env=changed)
  assert json.loads(proc.stdout)["parent"] == os.getpid()
  proc = cli_harness.run(["-m", "json.tool", "--help"])
  assert proc.returncode == 0 and "usage" in proc.stdout


def test_a_case_past_its_timeout_is_killed_and_the_next_one_runs(script, tmp_path):
  path = tmp_path / "sleeps.py"
  path.write_text("import time\ntime.sleep(60)\n")
  with pytest.raises(subprocess.TimeoutExpired):
    cli_harness.run([path], timeout=0.5)
  proc = cli_harness.run([script, "ok"])
  assert proc.returncode == 0 and json.loads(proc.stdout)["parent"] != os.getpid()


DEVICES_SCRIPT = """
import os, jax, relpos_jax
print(os.getppid(), jax.device_count(), float(jax.numpy.arange(4.0).sum()), relpos_jax.__file__)
"""


def test_a_forked_case_starts_jax_with_its_own_device_flags_and_the_checkouts_library(tmp_path):
  path = tmp_path / "devices.py"
  path.write_text(DEVICES_SCRIPT)
  flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)
  seen = []
  for extra in (" --xla_force_host_platform_device_count=2", ""):  # read when jax starts
    proc = cli_harness.run([path], env={**os.environ, "XLA_FLAGS": flags + extra})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen.append(proc.stdout.split())
  # Both forked by the same server, which started no backend: each case starts its own.
  assert seen[0][0] == seen[1][0] != str(os.getpid())
  assert [s[1:3] for s in seen] == [["2", "6.0"], ["1", "6.0"]]
  # This checkout's relpos_jax, never an installed copy of another checkout.
  assert all(pathlib.Path(s[3]).parent == cli_harness.ROOT / "relpos_jax" for s in seen)


def test_large_outputs_come_back_whole_and_a_dead_server_is_replaced(tmp_path):
  path = tmp_path / "loud.py"
  path.write_text("import sys\nprint('x' * 300000)\nsys.stderr.write('y' * 300000)\n")
  proc = cli_harness.run([path])  # more than a pipe holds, both ways
  assert (proc.returncode, proc.stdout, proc.stderr) == (0, "x" * 300000 + "\n", "y" * 300000)
  killer = tmp_path / "kills_the_server.py"
  killer.write_text("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n")
  with pytest.raises(RuntimeError, match="the fork server exited"):  # no hang: an error
    cli_harness.run([killer])
  again = cli_harness.run([path])  # a new server, started for it
  assert again.returncode == 0 and len(again.stdout) == 300001
