"""The workdir lock: held runs refuse a second one, released and stale locks are taken over."""

import errno
import fcntl
import json
import logging
import os
import socket
import subprocess
import sys

import pytest

from relpos_jax import workdir_lock


def _dead_pid():
  """The PID of a process that has exited (and was reaped)."""
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  return proc.pid


def _write_holder(workdir, **holder):
  os.makedirs(workdir, exist_ok=True)
  with open(workdir_lock.lock_path(workdir), "w") as f:
    json.dump({"host": socket.gethostname(), "since": "2024-01-01 00:00:00 UTC", **holder}, f)


def test_a_held_workdir_is_refused_naming_host_pid_and_since(tmp_path):
  workdir = str(tmp_path / "run")
  with workdir_lock.hold(workdir):
    with pytest.raises(workdir_lock.WorkdirLocked) as e:
      with workdir_lock.hold(workdir):
        pass
  message = str(e.value)
  assert "\n" not in message and f"workdir {workdir} is in use" in message
  assert f"host {socket.gethostname()}, PID {os.getpid()}, since " in message
  # Released: the record is emptied (the file stays) and the next run takes it silently.
  assert open(workdir_lock.lock_path(workdir)).read() == ""
  with workdir_lock.hold(workdir):
    assert json.load(open(workdir_lock.lock_path(workdir)))["pid"] == os.getpid()


def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path, caplog):
  workdir = str(tmp_path / "run")
  dead = _dead_pid()
  _write_holder(workdir, pid=dead)  # a run killed with -9: its record stays, its flock is gone
  with caplog.at_level(logging.WARNING), workdir_lock.hold(workdir):
    assert json.load(open(workdir_lock.lock_path(workdir)))["pid"] == os.getpid()
  warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
  assert len(warnings) == 1 and f"PID {dead}" in warnings[0] and "no longer running" in warnings[0]


def test_without_flock_liveness_comes_from_the_record(tmp_path, monkeypatch):
  def no_flock(fd, op):
    raise OSError(errno.ENOLCK, "No locks available")
  monkeypatch.setattr(fcntl, "flock", no_flock)
  workdir = str(tmp_path / "run")
  _write_holder(workdir, pid=os.getppid())  # alive, on this host
  with pytest.raises(workdir_lock.WorkdirLocked, match=f"PID {os.getppid()}"):
    with workdir_lock.hold(workdir):
      pass
  _write_holder(workdir, pid=1, host="another-node")  # cannot be checked from here
  with pytest.raises(workdir_lock.WorkdirLocked, match="host another-node.*delete that file"):
    with workdir_lock.hold(workdir):
      pass
  _write_holder(workdir, pid=_dead_pid())  # gone from this host: taken over
  with workdir_lock.hold(workdir):
    assert json.load(open(workdir_lock.lock_path(workdir)))["pid"] == os.getpid()
