"""Size and shape of the source, as a maintainer reads it: the figures issue 62 asks for before and after.

    python scripts/code_metrics.py            # a table
    python scripts/code_metrics.py --json     # the same figures as JSON

Counted over the project's packages (tests/ left out): lines of ``core/config.py``, imports inside functions (split
into the project's own modules, heavy or optional libraries whose lazy import is the point, and the rest), imports
repeated inside a file, the longest functions outside the verifier's ``evidence.py``, the number of functions over
80 lines, the import circles between files (from ``tests/test_import_graph.py``'s reading of the source) and the
README's lines.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_import_graph import PACKAGES, find_cycle, module_imports  # noqa: E402

#: Libraries whose import is heavy or optional: importing them inside the function that needs them is the point.
#: (bm25s: 0.3 s and numpy at import, and only the evidence backend's retrieval needs it, on first use.)
LAZY_OK = {"torch", "ray", "vllm", "transformers", "deepspeed", "peft", "trl", "openrlhf", "verl", "matplotlib",
           "datasets", "redis", "safetensors", "numpy", "fastapi", "uvicorn", "starlette", "httpx", "requests",
           "tqdm", "accelerate", "pydantic", "schemathesis", "hypothesis", "psutil", "prometheus_client",
           "sentence_transformers", "sklearn", "scipy", "yaml", "tomllib", "rich", "PIL", "nltk", "spacy",
           "huggingface_hub", "tokenizers", "grpc", "kubernetes", "aiohttp", "pytest", "opentelemetry",
           "bm25s"}
SCRIPT_DIRS = ("scripts",)


def source_files() -> list[Path]:
    files = []
    for pkg in PACKAGES + SCRIPT_DIRS:
        files += sorted((ROOT / pkg).rglob("*.py"))
    return files


def _imported_tops(node) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return ["." if node.level else (node.module or "").split(".")[0]]
    return []


def _import_key(node) -> tuple:
    if isinstance(node, ast.Import):
        return ("import", tuple(sorted(a.name for a in node.names)))
    return ("from", node.level, node.module, tuple(sorted((a.name, a.asname) for a in node.names)))


def measure() -> dict:
    own = set(PACKAGES)
    inside = {"own": 0, "heavy_or_optional": 0, "other": 0}
    inside_where: dict[str, list[str]] = {"own": [], "other": []}
    repeated: list[str] = []
    functions: list[tuple[int, str]] = []
    for path in source_files():
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_keys = {_import_key(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            functions.append((fn.end_lineno - fn.lineno + 1, f"{rel}:{fn.lineno} {fn.name}"))
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                # nested functions are walked again from their own def: count each import at its innermost function
                if any(node in ast.walk(inner) for inner in fn.body if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))):
                    continue
                tops = _imported_tops(node)
                if any(t in own or t == "." for t in tops):
                    kind = "own"
                elif all(t in LAZY_OK for t in tops):
                    kind = "heavy_or_optional"
                else:
                    kind = "other"
                inside[kind] += 1
                if kind in inside_where:
                    inside_where[kind].append(f"{rel}:{node.lineno} {ast.unparse(node)}")
                if _import_key(node) in top_keys:
                    repeated.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    outside_verifier = sorted((n, w) for n, w in functions
                              if not w.startswith("verifier_service/evidence.py"))
    edges = module_imports()
    cycle = find_cycle(edges)
    readme = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    return {
        "core/config.py lines": (ROOT / "core" / "config.py").read_text(encoding="utf-8").count("\n"),
        "imports inside functions": sum(inside.values()),
        "  of the project's own modules": inside["own"],
        "  of heavy or optional libraries": inside["heavy_or_optional"],
        "  of other libraries": inside["other"],
        "imports repeating one at the top of the file": len(repeated),
        "longest function (outside evidence.py)": f"{outside_verifier[-1][0]} ({outside_verifier[-1][1]})",
        "functions over 80 lines": sum(1 for n, _ in outside_verifier if n > 80),
        "functions over 60 lines": sum(1 for n, _ in outside_verifier if n > 60),
        "import circle between files": " -> ".join(cycle) or "none",
        "README.md lines": readme,
        "_over_80": [w for n, w in reversed(outside_verifier) if n > 80],
        "_own_inside": inside_where["own"],
        "_other_inside": inside_where["other"],
        "_repeated": repeated,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--list", choices=("over_80", "own_inside", "other_inside", "repeated"),
                        help="print the places behind one figure, one a line")
    args = parser.parse_args(argv)
    figures = measure()
    if args.list:
        print("\n".join(figures["_" + args.list]))
        return 0
    shown = {k: v for k, v in figures.items() if not k.startswith("_")}
    if args.json:
        print(json.dumps(shown, indent=1))
        return 0
    width = max(map(len, shown))
    for key, value in shown.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
