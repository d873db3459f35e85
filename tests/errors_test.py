"""One line for every known user mistake, through the real entry points; failed writes named."""

import errno
import os
import re
import socket
import sys

import pytest

from relpos_jax import errors
from relpos_jax import workdir as workdir_lib
from relpos_jax import workdir_lock
from relpos_jax.data import vocab as vocab_lib

import cli_harness  # pytest puts tests/ on the path

SMOKE = ["--config", "configs/default.py:smoke"]


def test_write_failure_names_what_where_and_the_cause_even_when_wrapped():
  full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  failure = errors.write_failure(full, "checkpoint 4", "/runs/x/checkpoints",
                                 "checkpoint 2 is intact")
  assert str(failure) == ("cannot write checkpoint 4 to /runs/x/checkpoints: No space left on "
                          "device [ENOSPC]; checkpoint 2 is intact")
  try:  # orbax re-raises the OSError of its writer as another type
    try:
      raise full
    except OSError as e:
      raise RuntimeError("save failed") from e
  except RuntimeError as wrapped:
    assert "[ENOSPC]" in str(errors.write_failure(wrapped, "x", "/p"))
  assert "[EROFS]" in str(errors.write_failure(ValueError("...: Read-only file system"), "x", "/p"))
  assert errors.write_failure(ValueError("shapes differ"), "x", "/p") is None  # a bug: kept


def test_an_unnamed_full_disk_still_exits_74_with_one_line(monkeypatch, capsys):
  def main(argv):
    raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/eval/extrapolation.md")
  monkeypatch.setattr(sys, "argv", ["eval.py"])
  with pytest.raises(SystemExit) as e:
    errors.run(main)
  assert e.value.code == errors.EXIT_WRITE_FAILED
  assert capsys.readouterr().err == (
      "error: /runs/x/eval/extrapolation.md: No space left on device [ENOSPC]\n")


def test_unknown_key_message_names_the_nearest_keys():
  keys = ["num_steps", "num_seeds", "model", "model.num_heads", "model.position",
          "model.position.name", "model.position.max_distance"]
  assert errors.unknown_key_message(keys, "model.num_head") == (
      "unknown config key 'model.num_head'; nearest valid keys: model.num_heads")
  # No close spelling: the keys beside it (never its own parents).
  assert errors.unknown_key_message(keys, "model.position.zzz") == (
      "unknown config key 'model.position.zzz'; nearest valid keys: model.position.name, "
      "model.position.max_distance")


def _messages(stderr):
  """stderr without absl's log lines (`I1201 10:00:00.000 ...`) and library warnings."""
  return [line for line in stderr.splitlines()
          if line.strip() and not re.match(r"[IWEF]\d{4} |WARNING:", line)]


def _corrupt_config(workdir):
  (workdir / "checkpoints" / "1").mkdir(parents=True)  # eval.py reads only runs with one
  (workdir / "config.json").write_text('{"model":\n')


# name: (entry point, arguments, what to prepare in the workdir, key words of the one line)
MISTAKES = {
    "unknown_key": ("train.py", [*SMOKE, "--config.model.num_head=3"], None,
                    ["unknown config key 'model.num_head'", "model.num_heads",
                     "--config.model.num_head=3"]),
    "missing_config_file": ("train.py", ["--config", "configs/nope.py"], None,
                            ["config file", "configs/nope.py not found"]),
    "malformed_flag_value": ("train.py", [*SMOKE, "--config.num_steps=ten"], None,
                             ["--config.num_steps=ten", "'ten'"]),
    "eval_lengths_not_integers": ("eval.py", ["--lengths", "ten"], None,
                                  ["--lengths", "'ten' not a positive integer"]),
    "corrupt_config_json_train": ("train.py", SMOKE, _corrupt_config,
                                  ["run/config.json is not valid JSON", "line 2"]),
    "corrupt_config_json_eval": ("eval.py", [], _corrupt_config,
                                 ["run/config.json is not valid JSON", "line 2"]),
    "held_workdir": ("train.py", SMOKE, "hold",
                     ["is in use by a run on host", socket.gethostname(),
                      f"PID {os.getpid()}", "since"]),
}
TRACEBACK_CASE = "unknown_key"  # also run with RELPOS_TRACEBACK=1


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  """Every mistake's process (and the traceback rerun), each forked by cli_harness.

  Returns {name: (returncode, stderr, workdir)}.
  """
  root = tmp_path_factory.mktemp("mistakes")
  jobs = {name: (script, args, prepare, {})
          for name, (script, args, prepare, _) in MISTAKES.items()}
  jobs["traceback"] = (*MISTAKES[TRACEBACK_CASE][:3], {errors.TRACEBACK_ENV: "1"})
  out = {}
  with workdir_lock.hold(str(root / "held_workdir" / "run")):  # a run of this process trains there
    for name, (script, args, prepare, env) in jobs.items():
      workdir = root / name / "run"
      workdir.parent.mkdir(exist_ok=True)
      if callable(prepare):
        prepare(workdir)
      proc = cli_harness.run([script, "--workdir", workdir, *args], env={**os.environ, **env},
                             timeout=180)
      out[name] = (proc.returncode, proc.stderr, workdir)
  return out


@pytest.mark.slow  # a subprocess each
@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_user_mistake_is_one_line_and_exit_1(name, finished):
  returncode, stderr, workdir = finished[name]
  assert returncode == errors.EXIT_USER_ERROR, stderr[-3000:]
  lines = _messages(stderr)
  assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
  for word in MISTAKES[name][3]:
    assert word in lines[0], (word, lines[0])
  assert "Traceback" not in stderr
  if name == "held_workdir":  # it wrote nothing
    assert sorted(os.listdir(workdir)) == [workdir_lock.LOCK_FILE]
  elif not name.startswith("corrupt") and workdir.exists():
    assert not (workdir / "metrics.jsonl").exists() and not (workdir / "config.json").exists()


@pytest.mark.slow
def test_the_traceback_stays_one_variable_away(finished):
  returncode, stderr, _ = finished["traceback"]
  assert returncode != 0 and "Traceback" in stderr and "AttributeError" in stderr


def test_a_corrupt_json_file_is_named(tmp_path):
  path = tmp_path / "vocab.json"
  path.write_text('{"tokens": [')
  with pytest.raises(ValueError, match=f"{path} is not valid JSON"):
    workdir_lib.read_json(str(path))
  with pytest.raises(ValueError, match=f"{path} is not a vocabulary file"):
    vocab_lib.Vocab.load(str(path))
