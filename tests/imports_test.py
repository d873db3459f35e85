"""The package's import graph: two layers, one way, no cycle, small modules.

The library (`relpos_jax/` outside `experiments/`) never imports the experiment
layer (`relpos_jax/experiments/`); no module imports another inside a function
(so the graph read here is the whole graph); no module is over 500 lines.
"""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "relpos_jax"
EXPERIMENTS = "relpos_jax.experiments"
# `python -m relpos_jax.<name>`: documented command names that only run
# `relpos_jax.experiments.<name>` (runpy); no module may import them.
COMMAND_ALIASES = ("relpos_jax.results", "relpos_jax.compare", "relpos_jax.sweep")
MAX_LINES = 500


def _module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> tuple[set[str], list[str]]:
  """(relpos_jax modules imported at top level, those imported inside a function)."""
  tree = ast.parse(path.read_text())
  top, nested = set(), []
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("relpos_jax"):
      # `from pkg import mod` imports pkg.mod; `from mod import name` imports mod.
      names = [f"{node.module}.{a.name}" if (PACKAGE.parent / node.module.replace(".", "/")
                                              / f"{a.name}.py").exists() else node.module
               for a in node.names]
    elif isinstance(node, ast.Import):
      names = [a.name for a in node.names if a.name.startswith("relpos_jax")]
    if not names:
      continue
    if node.col_offset == 0:
      top.update(names)
    else:
      nested += names
  return top, nested


def _graph():
  modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
  graph = {}
  for name, path in modules.items():
    top, _ = _imports(path)
    graph[name] = {m for m in top if m in modules and m != name}
  return graph, modules


def test_no_import_cycle():
  graph, _ = _graph()
  state: dict[str, int] = {}  # 1: on the current path, 2: done

  def visit(node, path):
    state[node] = 1
    for nxt in sorted(graph[node]):
      if state.get(nxt) == 1:
        raise AssertionError("import cycle: " + " -> ".join(path + [node, nxt]))
      if nxt not in state:
        visit(nxt, path + [node])
    state[node] = 2

  for node in sorted(graph):
    if node not in state:
      visit(node, [])


def test_no_import_inside_a_function():
  _, modules = _graph()
  nested = {name: _imports(path)[1] for name, path in modules.items()}
  assert {k: v for k, v in nested.items() if v} == {}


def _is_library(name: str) -> bool:
  return not (name == EXPERIMENTS or name.startswith(EXPERIMENTS + ".")
              or name in COMMAND_ALIASES)


def library_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
  """Library modules that import the experiment layer (or a command alias), and what."""
  return {name: sorted(m for m in deps if not _is_library(m))
          for name, deps in graph.items()
          if _is_library(name) and any(not _is_library(m) for m in deps)}


def test_the_library_never_imports_the_experiment_layer():
  graph, _ = _graph()
  assert {m for m in graph if m.startswith(EXPERIMENTS + ".")}, "no experiments/ package?"
  assert library_violations(graph) == {}


def test_the_layer_check_catches_a_library_module_importing_experiments():
  graph, _ = _graph()
  bad = {**graph, "relpos_jax.train_lib": graph["relpos_jax.train_lib"]
         | {"relpos_jax.experiments.report"}}
  assert library_violations(bad) == {"relpos_jax.train_lib": ["relpos_jax.experiments.report"]}


def test_no_module_imports_a_command_alias():
  graph, modules = _graph()
  assert {n: sorted(d & set(COMMAND_ALIASES)) for n, d in graph.items()
          if d & set(COMMAND_ALIASES)} == {}
  for alias in COMMAND_ALIASES:  # a name only: it runs the experiment module
    text = modules[alias].read_text()
    assert f'run_module("{alias.replace("relpos_jax.", EXPERIMENTS + ".")}"' in text


def test_the_trainer_and_one_checkpoint_evaluation_are_library():
  graph, _ = _graph()
  for name in ("relpos_jax.train_lib", "relpos_jax.evaluate", "relpos_jax.lm_eval",
               "relpos_jax.workdir"):
    assert _is_library(name) and name in graph
  assert "relpos_jax.architectures" not in graph["relpos_jax.workdir"]  # storage knows no model
  assert "relpos_jax.experiments.runner" not in graph["relpos_jax.experiments.sweep_spec"]


def test_no_module_is_over_500_lines():
  _, modules = _graph()
  long = {name: n for name, path in modules.items()
          if (n := len(path.read_text().splitlines())) > MAX_LINES}
  assert long == {}
