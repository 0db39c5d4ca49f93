"""The import graph between the project's top-level packages, read from the source (ast), function-level imports
included: a function-level import is still a dependency, it only hides it from import-time checks.

The layering, bottom to top: core (settings, contracts, metrics, retry, offline assets, the math) <-
verifier_service <- reward_service <- actors <- evaluation <- cluster (the trainer) <- integrations / baselines /
ops (the operator's tools) <- bench (a benchmark may time anything below it, the baselines' training loop
included) <- rlfh (the command: it imports every subcommand module by name, so the graph sees the dispatch).
The tests fail on any import that goes up or sideways between layers, on any cycle between packages, and on any
cycle between files (a piece two files both need goes down into the lower one, or into a small module of its own).
"""
from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "actors", "cluster", "reward_service", "verifier_service", "evaluation", "integrations",
            "baselines", "ops", "bench", "rlfh")

#: The layers, bottom to top; packages in one layer may not import each other.
LAYERS = (("core",), ("verifier_service",), ("reward_service",), ("actors",), ("evaluation",), ("cluster",),
          ("integrations", "baselines", "ops"), ("bench",), ("rlfh",))


def package_imports() -> dict[tuple[str, str], list[str]]:
    """``(importer, imported) -> ["path:line module", ...]`` over every import statement of every package."""
    edges: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for mod in modules:
                    top = mod.split(".")[0]
                    if top in PACKAGES and top != pkg:
                        edges[(pkg, top)].append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {mod}")
    return dict(edges)


def module_files() -> dict[str, Path]:
    """Every module of the packages, ``dotted.name -> path`` (a package's ``__init__.py`` under the package's name)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def module_imports() -> dict[tuple[str, str], list[str]]:
    """``(importer, imported) -> ["path:line", ...]`` between the packages' files, function-level (and
    TYPE_CHECKING) imports included. ``from pkg import name`` is an arrow to ``pkg.name`` where that is a module,
    else to ``pkg``; ``from pkg.mod import name`` and ``import pkg.mod`` are arrows to ``pkg.mod``."""
    modules = module_files()

    def owner(name: str):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:   # relative: from the importer's package
                    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    here = here[:len(here) - (node.level - 1)]
                    base = ".".join(here + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                imported = owner(target)
                if imported and imported != mod:
                    edges[(mod, imported)].append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    return dict(edges)


def find_cycle(edges) -> list[str]:
    """One cycle of the directed graph ``edges`` (a list of nodes, first == last), or [] when it has none."""
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        state[v] = 2
        path.pop()
        return []

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return []


def test_find_cycle():
    assert find_cycle([("a", "b"), ("b", "c")]) == []
    assert find_cycle([("a", "b"), ("b", "c"), ("c", "a")]) == ["a", "b", "c", "a"]


def test_no_cycles_between_packages():
    edges = package_imports()
    cycle = find_cycle(edges)
    where = "; ".join(edges[(a, b)][0] for a, b in zip(cycle, cycle[1:]))
    assert cycle == [], f"import cycle between packages {' -> '.join(cycle)} ({where})"


def test_no_cycles_between_files():
    """No two files import each other, directly or around a circle, not even from inside a function: such a circle
    only works because one of its imports waits until a call, and it ties the files together for good."""
    edges = module_imports()
    cycle = find_cycle(edges)
    where = "; ".join(f"{a} -> {b} ({edges[(a, b)][0]})" for a, b in zip(cycle, cycle[1:]))
    assert cycle == [], f"import cycle between files {' -> '.join(cycle)}: {where}"


def test_the_command_imports_every_subcommand():
    """The ``rlfh`` command reaches every module that registers a subcommand (a top-level ``add_parser``) through
    plain imports (rlfh.cli, and bench.cli for the benches), none by a name in a string (importlib), so the
    import graph sees the dispatch."""
    edges = module_imports()
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    reached, todo = set(), ["rlfh.cli"]
    while todo:
        mod = todo.pop()
        if mod not in reached:
            reached.add(mod)
            todo.extend(graph[mod])
    commands = sorted(mod for mod, path in module_files().items()
                      if any(isinstance(n, ast.FunctionDef) and n.name == "add_parser"
                             for n in ast.parse(path.read_text(encoding="utf-8")).body))
    assert "cluster.driver_cli" in commands and "bench.verifier" in commands
    assert [m for m in commands if m not in reached] == []
    for cli in ("rlfh/cli.py", "bench/cli.py"):
        assert "importlib" not in (ROOT / cli).read_text(encoding="utf-8"), cli


def test_every_import_goes_down_the_layers():
    rank = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
    assert sorted(rank) == sorted(PACKAGES)
    up = [f"{a} -> {b} ({where[0]})" for (a, b), where in sorted(package_imports().items()) if rank[b] >= rank[a]]
    assert up == []


def test_the_reward_service_path_needs_no_training_stack():
    """A reward-service image must not need DeepSpeed (issue 13): with the training stack unimportable, the
    service modules import and a response is verified and rewarded (offsets given, so no tokenizer is needed)."""
    import subprocess
    import sys
    code = """
import re, sys
for m in ("deepspeed", "torch", "transformers", "peft", "vllm"):
    sys.modules[m] = None          # import m -> ImportError
import reward_service.app, reward_service.cache, reward_service.client, reward_service.cli
from core.config import ServiceSettings
from reward_service.token_rewards import RewardSettings, compute_token_rewards
from verifier_service.core import Verifier
from core.verify_schema import VerifyRequest
text = "Paris is the capital of France."
res = Verifier(ServiceSettings.load(environ={})).verify(VerifyRequest(question="Capital of France?", response=text,
                                                                 materials=[text]))
offsets = [(m.start(), m.end()) for m in re.finditer(r"\\S+", text)]
print(res.sentences[0].statements[0].label, compute_token_rewards(res, offsets, len(text), RewardSettings()).score > 0)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["Correct", "True"]


def test_the_command_line_builds_without_torch():
    """``rlfh --help`` builds every subcommand's parser without importing torch, Ray or transformers (a
    subcommand imports them when it runs), so the command answers at once on a laptop."""
    import subprocess
    import sys
    code = ("import sys, rlfh.cli as c; c.build_parser(); "
            "print(sorted(m for m in ('torch', 'ray', 'transformers', 'vllm', 'deepspeed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
