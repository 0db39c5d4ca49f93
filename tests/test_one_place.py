"""One place per fact (issue 28): every environment variable the code reads is a setting of core/config.py (or a
third-party variable on the commented allow-list below), one label tuple, one ``free_port``.

These tests read the source (ast); they import nothing heavy and start nothing.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.config import RLFHConfig, env_name

ROOT = Path(__file__).resolve().parents[1]
#: Folders that hold no project source.
SKIP_DIRS = {"tests", ".venv", ".git", "rlfh.egg-info", "build", "dist", "node_modules", "runs", "shared"}

#: Variables the code may read although they are not RLFH settings: each belongs to another program, which
#: defines it, or says where it is used.
THIRD_PARTY_ENV = {
    # Ray's own: token auth and where its token lives, and its macOS/Windows cluster switch, which the embedded
    # Ray uses to stay on loopback (core/ray_bootstrap.py)
    "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
    # OpenMP: Ray gives each fractional-CPU actor OMP_NUM_THREADS=1 (actors/base.py reports it when debugging)
    "OMP_NUM_THREADS",
    # the dynamic loader and conda: where jemalloc may be found and what is preloaded already (actors/group.py)
    "LD_PRELOAD", "CONDA_PREFIX",
    # Hugging Face's cache folder and offline switch, handed on to the actors as they are (actors/group.py)
    "HF_HOME", "HF_HUB_OFFLINE",
    # scripts/gpu_smoke.py: the folder a GPU machine's harness collects results from
    "OUT",
    # the C compiler the usual way round: core/cpu_blas.py builds the MKL vendor shim with $CC when set
    "CC",
    # not another program's: the name of the recipe file (core.recipes.RECIPE_ENV) that chooses the settings'
    # values, so it cannot itself be one of them
    "RECIPE",
}

#: Functions that read variables whose names are not literals, and the names they can read.
def _forwarded_env() -> set[str]:
    """actors/group.py FORWARDED_ENV, read from the source (importing actors.group would import torch)."""
    tree = ast.parse((ROOT / "actors" / "group.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FORWARDED_ENV" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("actors/group.py has no FORWARDED_ENV tuple")


SETTINGS_ENV = {env_name(name) for name in RLFHConfig.model_fields}
DYNAMIC_READS = {
    ("actors/group.py", "actor_env"): _forwarded_env,          # hands FORWARDED_ENV on to the actors
    ("bench/train.py", "_cmd"): lambda: SETTINGS_ENV,             # env_name(setting): "was it set?"
    ("core/recipes.py", "recipe_name"): lambda: {"RECIPE"},       # core.recipes.RECIPE_ENV
}


def _is_os_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os")


def _name(arg: ast.AST):
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _project_files(skip: set[str] = SKIP_DIRS):
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in skip or any(p.startswith(".") for p in rel.parts[:-1]):
            continue
        yield rel.as_posix(), ast.parse(path.read_text(encoding="utf-8"))


class _EnvReads(ast.NodeVisitor):
    """Collects ``(function, line, name or None)`` of environment reads, ``function`` the innermost one."""

    def __init__(self):
        self.stack, self.reads = ["<module>"], []

    def visit_FunctionDef(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _read(self, node, arg):
        self.reads.append((self.stack[-1], node.lineno, _name(arg)))

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute) and node.args:
            if f.attr == "get" and _is_os_environ(f.value):
                self._read(node, node.args[0])
            elif f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os":
                self._read(node, node.args[0])
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.ctx, ast.Load) and _is_os_environ(node.value):
            self._read(node, node.slice)
        self.generic_visit(node)

    def visit_Compare(self, node):
        if (len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))
                and _is_os_environ(node.comparators[0])):
            self._read(node, node.left)
        self.generic_visit(node)


def environment_reads() -> list[tuple[str, str, int, str | None]]:
    """``(path, function, line, name or None)`` for every read of ``os.environ`` / ``os.getenv`` in the project's
    source outside tests/: ``os.environ.get(X)``, ``os.environ[X]``, ``X in os.environ``, ``os.getenv(X)``.
    ``None``: the name is not a literal. Writes (``os.environ[X] = ...``, ``setdefault``, ``update``) are not reads."""
    out = []
    for rel, tree in _project_files():
        v = _EnvReads()
        v.visit(tree)
        out += [(rel, func, line, name) for func, line, name in v.reads]
    return out


def test_the_scan_finds_environment_reads():
    """The scanner itself: it sees the reads this checkout is known to have (so an empty result is not a pass)."""
    reads = environment_reads()
    assert ("actors/group.py", "actor_env") in {(p, f) for p, f, _, _ in reads}
    assert any(name == "RAY_AUTH_MODE" for *_, name in reads)


def test_every_environment_variable_the_code_reads_is_a_setting():
    """A variable a user may set is a setting of core/config.py: `rlfh config`, docs/CONFIG.md and the Helm chart
    list it, with its type, default and meaning. Third-party variables are on THIRD_PARTY_ENV with a reason.
    Fix a failure by adding a setting (``setting(...)`` in core/config.py; ``cli=False`` and ProcessSettings for
    one every process reads from its own environment, then regenerate docs/CONFIG.md and the chart), or, for
    another program's variable, by adding it to THIRD_PARTY_ENV with a comment."""
    bad = []
    for path, func, line, name in environment_reads():
        if name is None:
            allowed = DYNAMIC_READS.get((path, func))
            if allowed is None:
                bad.append(f"{path}:{line} ({func}) reads a variable whose name is not a literal; list the "
                           "function in DYNAMIC_READS with the names it can read")
                continue
            unknown = allowed() - SETTINGS_ENV - THIRD_PARTY_ENV
            if unknown:
                bad.append(f"{path}:{line} ({func}) can read {sorted(unknown)}: neither settings nor third-party")
        elif name not in SETTINGS_ENV and name not in THIRD_PARTY_ENV:
            bad.append(f"{path}:{line} ({func}) reads {name}: not a setting of core/config.py")
    assert bad == [], "\n".join(bad)


def test_actor_timeout_comes_from_the_setting_only():
    """actors/calls.py has no default, no module-wide value and no environment read of its own: every wait takes
    the timeout of the run's config, passed by the caller."""
    import actors.calls as calls
    src = (ROOT / "actors" / "calls.py").read_text(encoding="utf-8")
    assert "os.environ" not in src and "1800" not in src and "global " not in src
    assert calls.timeout_s(RLFHConfig(actor_timeout_s=42.0)) == 42.0
    assert calls.start_timeout_s(RLFHConfig(actor_timeout_s=42.0)) == 300.0
    with pytest.raises(TypeError):
        calls.timeout_s()


def test_the_five_labels_are_spelled_out_once():
    """core.verify_schema.LABELS is the label tuple; a tuple / Literal of all five label strings anywhere else is a
    second copy. KNOWN_COPIES are copies still to be replaced by an import (owned by work in progress)."""
    from core.reward_settings import DEFAULT_VERIFICATION_MAP
    from core.verify_schema import LABELS
    known_copies: set[str] = set()
    assert tuple(DEFAULT_VERIFICATION_MAP) == LABELS
    copies = []
    for rel, tree in _project_files():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                values = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if set(LABELS) <= values:
                    copies.append(rel)
    assert sorted(set(copies) - known_copies) == ["core/verify_schema.py"], copies


def test_one_free_port():
    """``free_port`` is defined once, in core/ports.py (the ``BaseActor.free_port`` method calls it on the actor's
    node); the copy the tests import is that one."""
    import conftest
    from core import ports
    defs = []
    for rel, tree in _project_files(SKIP_DIRS - {"tests"}):
        for node in tree.body:     # module-level functions only
            if isinstance(node, ast.FunctionDef) and node.name == "free_port":
                defs.append(rel)
    assert defs == ["core/ports.py"]
    assert conftest.free_port is ports.free_port
    port = ports.free_port()
    lo, hi = ports.PORT_RANGE
    assert lo <= port <= hi and ports.port_is_free(port)


def test_verifier_backends_are_listed_once():
    """core/verifier_backends.py lists the backends; the config's choices, the verifier's builders and the
    hand-written docs all name exactly those."""
    import typing
    from pathlib import Path

    from core.config import RLFHConfig
    from core.verifier_backends import BACKEND_NAMES
    from verifier_service.core import BACKENDS, BUILDERS
    assert typing.get_args(RLFHConfig.model_fields["verifier_backend"].annotation) == BACKEND_NAMES
    assert BACKENDS == tuple(BUILDERS) == BACKEND_NAMES
    root = Path(__file__).resolve().parents[1]
    for doc in ("docs/ARCHITECTURE.md", "CONTRIBUTING.md", "docs/CONFIG.md"):
        text = (root / doc).read_text(encoding="utf-8")
        assert all(name in text for name in BACKEND_NAMES), doc
