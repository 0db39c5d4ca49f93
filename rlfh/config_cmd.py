"""``rlfh config``: print every setting with its environment variable, flag, type, default, the value the recipe
and the current environment give it and where that value came from; ``--format markdown`` prints docs/CONFIG.md.
"""
from __future__ import annotations

import argparse
import json

from core.config import (NO_RECIPE, RLFHConfig, add_recipe_arg, describe_settings, field_of_env, masked_value,
                         read_recipe, recipe_name)
from rlfh.config_doc import config_markdown


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="Print every setting: env var, flag, type, default, current value, help.",
                       description="Print every setting with its environment variable, CLI flag, type, default, "
                                   "the value the recipe and the current environment give it and where that value "
                                   "came from (default, recipe:NAME, env). Exit code 2 on a bad value.")
    p.add_argument("--format", choices=["table", "env", "json", "markdown"], default="table",
                   help="table (human), env (KEY=value lines for a .env file; secrets in clear), json (secrets "
                        "masked), or markdown (docs/CONFIG.md: every setting's defaults, not the current values).")
    add_recipe_arg(p)
    p.set_defaults(func=_cmd_config)


def _print_table(rows: list[dict[str, str]], current: dict[str, str], sources: dict[str, str],
                 recipe: str) -> None:
    from rich.console import Console      # only the table needs rich: every other `rlfh` command starts without it
    from rich.table import Table
    about = f"recipe {recipe}" + (f": {read_recipe(recipe)[1]}" if recipe != NO_RECIPE else " (the defaults)")
    t = Table(title=f"RLFH settings, {about} (CLI flag > environment > recipe > default)", show_lines=False)
    for col in ("variable", "type", "value", "from", "help"):
        t.add_column(col, overflow="fold")
    for r in rows:
        val = current[r["env"]]
        mark = "" if val == r["default"] else " *"
        t.add_row(r["env"], r["type"], masked_value(r["env"], val) + mark, sources[field_of_env(r["env"])],
                  r["help"])
    Console(width=170).print(t)
    print("(* = differs from the default; from: default, recipe:NAME (the recipe file that set it) or env)")


def _cmd_config(args: argparse.Namespace) -> int:
    cfg = RLFHConfig.load(recipe=args.recipe)          # a bad value is exit 2, whatever the format
    sources = RLFHConfig.sources(recipe=args.recipe)
    current = cfg.to_env()
    rows = describe_settings()
    if args.format == "env":
        for r in rows:
            print(f"{r['env']}={current[r['env']]}")
    elif args.format == "markdown":
        print(config_markdown(), end="")
    elif args.format == "json":
        print(json.dumps({r["env"]: {**r, "value": masked_value(r["env"], current[r["env"]]),
                                     "source": sources[field_of_env(r["env"])]} for r in rows}, indent=2))
    else:
        _print_table(rows, current, sources, recipe_name(args.recipe))
    return 0
