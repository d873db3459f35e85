"""The package's import graph has no cycle, and no module hides an import inside a function."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "relpos_jax"


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


def test_the_layers_run_one_way():
  graph, _ = _graph()
  # Entry points -> sweep -> train_lib -> evaluate -> (scoring, losses, workdir) -> model.
  assert "relpos_jax.train_lib" not in graph["relpos_jax.evaluate"]
  assert "relpos_jax.sweep" not in graph["relpos_jax.train_lib"]
  for low in ("relpos_jax.scoring", "relpos_jax.losses", "relpos_jax.workdir"):
    assert not graph[low] & {"relpos_jax.evaluate", "relpos_jax.train_lib", "relpos_jax.sweep"}

