"""Records are stored only from a clean tree, and name their workdir portably."""

import os
import subprocess

import pytest

from relpos_jax import provenance

REAL_IS_DIRTY = provenance.is_dirty  # conftest makes every test's checkout look clean


def _git(repo, *args):
  subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_dirty_tree_is_refused_unless_allowed(tmp_path, monkeypatch):
  monkeypatch.setattr(provenance, "is_dirty", REAL_IS_DIRTY)
  _git(tmp_path, "init", "-q")
  (tmp_path / "a.py").write_text("x = 1\n")
  _git(tmp_path, "add", "a.py")
  _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
  (tmp_path / "untracked.txt").write_text("not tracked: does not count\n")
  provenance.check_clean_tree(False, repo=str(tmp_path))
  (tmp_path / "a.py").write_text("x = 2\n")
  with pytest.raises(ValueError, match="uncommitted changes.*--allow_dirty"):
    provenance.check_clean_tree(False, repo=str(tmp_path))
  provenance.check_clean_tree(True, repo=str(tmp_path))  # overridden


def test_changed_records_do_not_make_the_code_dirty(tmp_path, monkeypatch):
  """A sweep appending to committed records (more seeds) may store its next run."""
  monkeypatch.setattr(provenance, "is_dirty", REAL_IS_DIRTY)
  _git(tmp_path, "init", "-q")
  (tmp_path / "results" / "t" / "records").mkdir(parents=True)
  record = tmp_path / "results" / "t" / "records" / "r.jsonl"
  record.write_text("{}\n")
  (tmp_path / "RESULTS.md").write_text("# results\n")
  (tmp_path / "a.py").write_text("x = 1\n")
  _git(tmp_path, "add", ".")
  _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
  record.write_text("{}\n{}\n")
  (tmp_path / "RESULTS.md").write_text("# results, rendered again\n")
  assert not provenance.is_dirty(str(tmp_path))
  provenance.check_clean_tree(False, repo=str(tmp_path))
  (tmp_path / "a.py").write_text("x = 2\n")
  assert provenance.is_dirty(str(tmp_path))


def test_portable_path_never_names_the_machine(tmp_path):
  repo = tmp_path / "repo"
  (repo / "runs" / "x").mkdir(parents=True)
  assert provenance.portable_path(str(repo / "runs" / "x"), repo=str(repo)) == os.path.join(
      "runs", "x")
  assert provenance.portable_path("/elsewhere/runs/y/", repo=str(repo)) == "y"
