"""docs/CONFIG.md, generated from the settings' definitions (``scripts/gen_config_doc.py`` writes it, ``rlfh config
--format markdown`` prints it): every setting by role, with its variable, flag, type, default, who reads it, its
short help, and the longer reference text a setting's ``doc=`` gives.
"""
from __future__ import annotations

import json
import typing
from typing import Any, Literal

from core.config import (ROLE_CLASSES, ROLES, SECRET_ENVS, DemoSettings, LauncherSettings, ProcessSettings,
                         RLFHConfig, ServiceSettings, available_recipes, doc_of, env_name, flag_name, has_flag,
                         ordered_fields, role_of)

#: Section titles of docs/CONFIG.md, one per role of :data:`core.config.ROLES`.
ROLE_TITLES = {
    "model": "Model", "rollout": "Rollout: prompts, sampling, engines", "policy": "Policy: advantages, loss, optimizer",
    "critic": "Critic", "reward": "Reward", "verifier": "Verifier",
    "service": "Services (Ray Serve, cache, reward client)", "placement": "Placement: Ray, actor groups, CPU threads",
    "evaluation": "Evaluation in the training loop", "trainer": "Trainer: run length, checkpoints, logs, faults",
    "process": "Every process (environment only)",
    "launcher": "scripts/train.sh: warm start and held-out report (environment only)",
    "demo": "scripts/demo.sh: the gate baseline (environment only)",
}
#: The command that writes docs/CONFIG.md (tests/test_config.py names it when the file is stale).
CONFIG_DOC_COMMAND = ".venv/bin/python scripts/gen_config_doc.py"


def _md_cell(text: str) -> str:
    """Text for one markdown table cell (a ``|`` would end the cell)."""
    return text.replace("|", "\\|").replace("\n", " ")


def _md_type(info: Any) -> str:
    """A field's type as docs/CONFIG.md shows it: choices of a Literal, "or empty" for an Optional."""
    ann, empty = info.annotation, ""
    args = typing.get_args(ann)
    if type(None) in args:                      # Optional[X]: an empty variable means None
        ann, empty = next(a for a in args if a is not type(None)), " or empty"
    if typing.get_origin(ann) is Literal:
        base = " / ".join(f"`{a}`" for a in typing.get_args(ann))
    elif typing.get_origin(ann) is dict:
        base = "JSON object"
    else:
        base = getattr(ann, "__name__", str(ann))
    return base + empty


def _read_by(name: str) -> str:
    """Who reads setting ``name``: the services, the trainer, every process, train.sh or demo.sh."""
    sections = (("every process", ProcessSettings), ("services", ServiceSettings), ("train.sh", LauncherSettings),
                ("demo.sh", DemoSettings))
    return next((who for who, cls in sections if name in cls.model_fields), "trainer")


def _default(d: Any) -> str:
    """A default as the environment variable is written."""
    return json.dumps(d) if isinstance(d, dict) else "" if d is None else str(d).lower() if isinstance(d, bool) \
        else str(d)


def _intro() -> list[str]:
    return [
        "# Configuration reference",
        "",
        f"<!-- Generated from core/settings/ by `{CONFIG_DOC_COMMAND}`; do not edit by hand "
        "(tests/test_config.py fails when this file differs from the generated text). -->",
        "",
        "Every setting is defined once, in `core/settings/`, one class per role (the model, the rollout, the "
        "policy, the critic, the reward, the verifier, the services, the placement, the evaluation, the trainer's "
        "run) and three sections read from the environment only; `core/config.py` is their public face. "
        "`rlfh config` prints them with the values the current environment gives them "
        "(`--format env|json|markdown`), and a bad value stops a launch with a message naming the variable and "
        "what it accepts. Precedence: CLI flag > environment variable > recipe > default. `rlfh train --help` "
        "lists every flag with its short help; the longer reference of a setting is under its role's table here.",
        "",
        "A recipe is a file of settings in `recipes/` (" + ", ".join(f"`{r}`" for r in available_recipes()) +
        "), named with `--recipe NAME` (`rlfh train`, `rlfh config`), `RECIPE=NAME` or `scripts/train.sh NAME`; "
        "`make train` runs `main`. `rlfh config --recipe NAME` prints each value and where it came from "
        "(default, recipe:NAME, env, flag). The defaults below are the values with no recipe.",
        "",
        "- **read by**: `services` settings are the section the verifier and reward services read "
        "(`ServiceSettings`; the trainer reads them too), `trainer` ones only the trainer (`RLFHConfig`), "
        "`every process` ones are read by each process from its own environment and have no flag "
        "(`ProcessSettings`), `train.sh` ones by `scripts/train.sh` around `rlfh train` (`LauncherSettings`, "
        "no flag either), `demo.sh` ones by `scripts/demo.sh`'s gate baseline (`DemoSettings`, no flag).",
        "- Secrets (" + ", ".join(f"`{e}`" for e in SECRET_ENVS) + ") are masked when printed and kept out of "
        "Serve configs; on Kubernetes they come from a Secret (docs/DEPLOY.md).",
        "- On Kubernetes, any of these variables can be set in the Helm chart's `train.env` unless the chart "
        "has a typed value for it (`helm/rlfh/values.yaml`); the recipe is `train.recipe`, and typed values left "
        "null are not written, so the recipe's hold (docs/DEPLOY.md, \"Values\").",
    ]


def config_markdown() -> str:
    """docs/CONFIG.md: every setting by role, with its variable, flag, type, default, help and reference.

    Generated from the field definitions only (never from the current environment), so the file is the same on
    every machine.
    """
    out = _intro()
    fields = ordered_fields(RLFHConfig)
    for role in ROLES:
        rows = [(n, i) for n, i in fields if role_of(n) == role]
        if not rows:
            continue
        classes = ", ".join(f"`{c.__name__}`" for c in ROLE_CLASSES[role])
        out += ["", f"## {ROLE_TITLES.get(role, role)}", "", f"Defined by {classes}.", "",
                "| variable | flag | type | default | read by | meaning |", "|---|---|---|---|---|---|"]
        for name, info in rows:
            default = _default(info.default)
            flag = f"`{flag_name(name)}`" if has_flag(name) else "(none)"
            out.append(f"| `{env_name(name)}` | {flag} | {_md_cell(_md_type(info))} | "
                       f"{_md_cell(f'`{default}`' if default else '(empty)')} | {_read_by(name)} | "
                       f"{_md_cell(info.description or '')} |")
        notes = [f"- `{env_name(name)}`: {doc_of(name)}" for name, _ in rows if doc_of(name)]
        if notes:
            out += ["", "More on these:", "", *notes]
    return "\n".join(out) + "\n"
