#!/usr/bin/env python
"""Regenerate the chart's generated files and the plain KubeRay manifests (or check they are current).

    .venv/bin/python deploy/chart_sync.py          # write
    .venv/bin/python deploy/chart_sync.py --check  # exit 1 and name the stale files (CI runs this via tests)

What it writes, all derived from code that is the single source of truth:

* ``helm/rlfh/files/settings.json`` -- every RLFHConfig setting (env var, role, type, default as the
  env-var string, choices). Templates read it to reject unknown ``train.env`` keys and to fill the
  Serve app's ``args`` with the defaults, exactly like ``reward_service.serve_config.serve_config``.
* ``$defs.settings`` inside ``helm/rlfh/values.schema.json`` -- one JSON schema per env var (type,
  enum, bounds, label/score keys of the maps), so ``helm install`` rejects ``GRANULARITY: tokens`` or a
  ``verificationMap`` with an unknown label before anything reaches the cluster. The rest of the
  schema is hand-written and kept as is.
* ``helm/rlfh/files/rlfh-dashboard.json`` -- copy of ``deploy/grafana/rlfh-dashboard.json`` (a chart
  cannot read files outside its folder).
* ``deploy/kuberay/*.yaml`` -- the chart rendered with ``deploy/kuberay/values.yaml`` through the
  Helm SDK (helm-python-sdk), Helm-only labels stripped: plain manifests for ``kubectl apply``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import typing
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# the project's modules, importable once ROOT is on the path (the script runs from a checkout)
from core.config import RECIPE_DIRS, RLFHConfig, env_name, ordered_fields, role_of  # noqa: E402
from core.verify_schema import INFO_SCORES, LABELS  # noqa: E402
from reward_service import serve_config as sc  # noqa: E402

CHART = ROOT / "helm" / "rlfh"
SETTINGS_JSON = CHART / "files" / "settings.json"
SCHEMA_JSON = CHART / "values.schema.json"
DASHBOARD_SRC = ROOT / "deploy" / "grafana" / "rlfh-dashboard.json"
DASHBOARD_CHART = CHART / "files" / "rlfh-dashboard.json"
PLAIN_DIR = ROOT / "deploy" / "kuberay"
PLAIN_VALUES = PLAIN_DIR / "values.yaml"
PLAIN_RELEASE = "rlfh"
PLAIN_NAMESPACE = "default"
# chart template -> plain manifest file
PLAIN_FILES = {
    "raycluster.yaml": ["configmap.yaml", "secret.yaml", "redis.yaml", "raycluster.yaml"],
    "rayjob.yaml": ["rayjob.yaml"],
    "rayservice.yaml": ["rayservice.yaml", "ingress.yaml", "networkpolicy.yaml"],
}
HELM_ONLY_LABELS = ("helm.sh/chart",)


# ------------------------------------------------------------------------------------------ settings
def _type_name(annotation) -> str:
    if annotation is bool:
        return "bool"
    if annotation is int:
        return "int"
    if annotation is float:
        return "float"
    if typing.get_origin(annotation) is dict:
        return "map"
    if set(typing.get_args(annotation)) == {float, type(None)}:
        return "float or empty"
    return "str"


def settings_table() -> list[dict]:
    """One row per RLFHConfig setting, by role: env, role, type, default (env-var string), choices, bounds."""
    defaults_env = RLFHConfig.load({}).to_env()
    rows = []
    for name, info in ordered_fields(RLFHConfig):     # by role, as `rlfh config` lists them
        env = env_name(name)
        row = {"env": env, "field": name, "role": role_of(name),
               "type": _type_name(info.annotation), "default": defaults_env[env]}
        if typing.get_origin(info.annotation) is typing.Literal:
            row["choices"] = list(typing.get_args(info.annotation))
        for m in info.metadata:
            for attr in ("ge", "gt", "le", "lt"):
                if getattr(m, attr, None) is not None:
                    row[attr] = getattr(m, attr)
        rows.append(row)
    return rows


def generated_tables() -> dict:
    """``files/settings.json``: the settings plus the Serve app's fixed names from reward_service.serve_config."""
    serve_args = set(sc.service_arg_envs())
    rows = [{**row, "serve_arg": row["env"] in serve_args} for row in settings_table()]
    return {
        "settings": rows,
        # the recipes the image carries (train.recipe must name one of them, or a .toml path)
        "recipes": sorted(f.stem for f in RECIPE_DIRS[0].glob("*.toml")),
        "serve": {"app_name": sc.APP_NAME, "import_path": sc.IMPORT_PATH,
                  "verifier_deployment": sc.VERIFIER_DEPLOYMENT, "reward_deployment": sc.REWARD_DEPLOYMENT,
                  "target_ongoing_requests": sc.TARGET_ONGOING_REQUESTS, "routes": list(sc.ROUTES),
                  "max_ongoing_requests": sc.MAX_ONGOING_REQUESTS, "backpressure": sc.backpressure_options(),
                  "shutdown": sc.shutdown_options()},
    }


def setting_schema(row: dict) -> dict:
    """JSON schema (draft 2020-12) of one env var's value in values.yaml."""
    desc = f"{row['env']} (RLFHConfig.{row['field']}); default {row['default']!r}"
    if row["env"] == "VERIFICATION_MAP":
        return {"description": desc + ". Keys: the verifier labels; values: numbers.", "type": "object",
                "properties": {label: {"type": "number"} for label in LABELS}, "additionalProperties": False}
    if row["env"] == "INFORMATIVE_MAP":
        return {"description": desc + ". Keys: informativeness scores \"1\"..\"5\"; values: numbers.",
                "type": "object", "properties": {str(s): {"type": "number"} for s in INFO_SCORES},
                "additionalProperties": False}
    s: dict = {"description": desc}
    if "choices" in row:
        s["enum"] = row["choices"]
    elif row["type"] == "bool":
        s["type"] = "boolean"
    elif row["type"] in ("int", "float"):
        s["type"] = "integer" if row["type"] == "int" else "number"
        for attr, key in (("ge", "minimum"), ("gt", "exclusiveMinimum"), ("le", "maximum"), ("lt", "exclusiveMaximum")):
            if attr in row:
                s[key] = row[attr]
    elif row["type"] == "float or empty":  # Optional[float]: a number, or "" for "not set"
        s["anyOf"] = [{"type": "number"}, {"type": "string", "maxLength": 0}]
    else:
        s["type"] = "string"
    return s


def render_schema(current: dict) -> dict:
    rows = settings_table()
    schema = dict(current)
    defs = dict(schema.get("$defs", {}))
    defs["settings"] = {row["env"]: setting_schema(row) for row in rows}
    defs["settingsEnv"] = {
        "description": "train.env: any RLFHConfig setting by its env var name (`rlfh config` lists them)",
        "type": "object", "additionalProperties": False,
        "properties": {row["env"]: {"$ref": f"#/$defs/settings/{row['env']}"} for row in rows}}
    schema["$defs"] = defs
    return schema


# ------------------------------------------------------------------------------------------ plain manifests
def _strip_helm_labels(obj):
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in ("labels", "matchLabels") and isinstance(v, dict):
                v = {lk: lv for lk, lv in v.items() if lk not in HELM_ONLY_LABELS}
                if v.get("app.kubernetes.io/managed-by") == "Helm":
                    v["app.kubernetes.io/managed-by"] = "kubectl"
            out[k] = _strip_helm_labels(v)
        return out
    if isinstance(obj, list):
        return [_strip_helm_labels(x) for x in obj]
    return obj


def render_chart(values: dict, release: str = PLAIN_RELEASE, namespace: str = PLAIN_NAMESPACE) -> dict[str, str]:
    """Render helm/rlfh with the Helm SDK; returns {template path: manifest text}."""
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values, name=release, namespace=namespace, is_install=True)


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (serveConfigV2, runtimeEnvYAML) as literal blocks, like the chart writes them."""


def _str_representer(dumper, text):
    style = "|" if "\n" in text and not any(line != line.rstrip() for line in text.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_LiteralDumper.add_representer(str, _str_representer)


def plain_manifests() -> dict[str, str]:
    values = yaml.safe_load(PLAIN_VALUES.read_text()) or {}
    rendered = render_chart(values)
    out = {}
    header = ("# Generated by `python deploy/chart_sync.py` from helm/rlfh with deploy/kuberay/values.yaml.\n"
              "# Do not edit by hand: change the chart or that values file and regenerate.\n"
              "# Before `kubectl apply -f`: replace every CHANGE-ME in the Secret rlfh-secrets (raycluster.yaml);\n"
              "# the Redis password appears twice (REDIS_PASSWORD and inside REDIS_URL).\n")
    for target, templates in PLAIN_FILES.items():
        docs = []
        for t in templates:
            text = rendered.get(f"rlfh/templates/{t}", "")
            for doc in yaml.safe_load_all(text):
                if doc:
                    docs.append(_strip_helm_labels(doc))
        body = "".join("---\n" + yaml.dump(d, Dumper=_LiteralDumper, sort_keys=False, width=120) for d in docs)
        out[target] = header + body
    return out


# ------------------------------------------------------------------------------------------ main
def expected_files() -> dict[Path, str]:
    files: dict[Path, str] = {}
    files[SETTINGS_JSON] = json.dumps(generated_tables(), indent=1) + "\n"
    current_schema = json.loads(SCHEMA_JSON.read_text())
    files[SCHEMA_JSON] = json.dumps(render_schema(current_schema), indent=2) + "\n"
    files[DASHBOARD_CHART] = DASHBOARD_SRC.read_text()
    return files


def stale_files() -> list[str]:
    """Paths (relative to the repo) whose content differs from what this script would write."""
    stale = []
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            stale.append(str(path.relative_to(ROOT)))
    # the plain manifests depend on the generated chart files: compare only when those are current
    if not stale:
        for name, text in plain_manifests().items():
            p = PLAIN_DIR / name
            if not p.exists() or p.read_text() != text:
                stale.append(str(p.relative_to(ROOT)))
    return stale


def write_all() -> list[str]:
    written = []
    for path, text in expected_files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(str(path.relative_to(ROOT)))
    for name, text in plain_manifests().items():
        p = PLAIN_DIR / name
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
            written.append(str(p.relative_to(ROOT)))
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 listing stale files")
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    if args.check:
        stale = stale_files()
        if stale:
            print("stale generated files (run `.venv/bin/python deploy/chart_sync.py`):\n  " + "\n  ".join(stale))
            return 1
        print("chart files and deploy/kuberay manifests are up to date")
        return 0
    written = write_all()
    print("wrote:\n  " + "\n  ".join(written) if written else "nothing to do: everything up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
