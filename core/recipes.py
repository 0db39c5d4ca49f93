"""The recipe loader: a recipe is one small TOML file of settings, ``recipes/NAME.toml``, keyed by the settings'
environment variable names::

    description = "what the recipe is for"        # optional
    extends = "abstain-closed-book"                # optional: start from that recipe, then apply this file's keys
    ACTOR_LR = 5e-6
    DEV_SELECT_MAX_INCORRECT = ""                  # "" is an empty value (a "float or empty" setting's None)

It sits between the defaults and the environment: CLI flag > environment variable > recipe > default.

Why this is in core: every ``Settings.load()`` honours ``RECIPE`` from the environment, in every process that
builds a config (the trainer, an actor, ``rlfh eval``), and core is the bottom layer, so what reads a recipe
file cannot sit above it. It is its own module, below the settings classes (:mod:`core.settings.names` is all it
needs of them).
"""
from __future__ import annotations

import argparse
import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.settings.names import RENAMED_SETTINGS, all_fields, env_name, renamed_message, role_of

#: The variable that names the recipe (``--recipe`` on ``rlfh train`` and ``rlfh config`` beats it).
RECIPE_ENV = "RECIPE"
#: The recipe name that means "no recipe": every setting at its default unless the environment or a flag sets it.
NO_RECIPE = "none"
#: Where named recipes are looked up: the repository's recipes/ (next to core/), then the working directory's (an
#: installed package, e.g. the container image, runs scripts/train.sh from the folder that holds recipes/).
RECIPE_DIRS = (Path(__file__).resolve().parents[1] / "recipes", Path("recipes"))
#: The keys of a recipe file that are not settings.
RECIPE_META_KEYS = ("description", "extends")
#: The recipe values that are JSON objects: a TOML table (or JSON text).
MAP_KEYS = ("VERIFICATION_MAP", "INFORMATIVE_MAP")


def available_recipes() -> list[str]:
    """Names of the recipes in recipes/ (``rlfh config`` and the unknown-recipe error list them)."""
    names: set[str] = set()
    for folder in RECIPE_DIRS:
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.toml"))
    return sorted(names)


def recipe_path(name: str) -> Path:
    """The file of recipe ``name``: ``recipes/NAME.toml``, or ``name`` itself when it is a path to a .toml file."""
    if name.endswith(".toml") or os.sep in name or "/" in name:
        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"{RECIPE_ENV} (--recipe) = {name!r}: no such recipe file")
        return path
    for folder in RECIPE_DIRS:
        if (folder / f"{name}.toml").is_file():
            return folder / f"{name}.toml"
    known = ", ".join(available_recipes()) or "(none found)"
    raise ConfigError(f"{RECIPE_ENV} (--recipe) = {name!r}: no recipe of that name in {RECIPE_DIRS[0]}; the "
                      f"recipes are {known}, '{NO_RECIPE}' (every setting at its default) or a path to a .toml file")


def recipe_label(path: Path) -> str:
    """How ``rlfh config`` names the recipe a value came from: ``recipe:NAME`` (``recipe:PATH`` for a file outside
    recipes/); :func:`recipe_path` of what follows ``recipe:`` is the file."""
    named = any(path.resolve() == (folder / path.name).resolve() for folder in RECIPE_DIRS)
    return f"recipe:{path.stem}" if named else f"recipe:{path}"


@lru_cache(maxsize=64)
def _read_recipe_file(path: str, mtime_ns: int) -> dict[str, Any]:
    """The parsed TOML of one recipe file (cached until the file changes)."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"recipe file {path}: not valid TOML ({e})") from None


def _recipe_chain(name: str) -> list[Path]:
    """Recipe ``name``'s file and the files it extends, the recipe's own first."""
    chain: list[Path] = []
    path = recipe_path(name)
    while True:
        if path.resolve() in [p.resolve() for p in chain]:
            raise ConfigError(f"recipe file {path}: 'extends' loops ({' -> '.join(str(p) for p in chain)} -> {path})")
        chain.append(path)
        parent = _read_recipe_file(str(path), path.stat().st_mtime_ns).get("extends")
        if parent is None:
            return chain
        if not isinstance(parent, str) or not parent:
            raise ConfigError(f"recipe file {path}: extends = {parent!r}: must be the name of another recipe")
        path = recipe_path(parent)


def _check_key(path: Path, key: str, value: Any, fields: dict[str, str]) -> None:
    """ConfigError naming the file, the key and the fix when ``key = value`` cannot be a recipe's setting."""
    if key in RENAMED_SETTINGS:
        raise ConfigError(f"recipe file {path}: {renamed_message(key, 'a recipe key')}")
    if key not in fields:
        hint = (f"; settings are named by their environment variable, here {key.upper()}"
                if key.upper() in fields else "; `rlfh config` lists every setting")
        raise ConfigError(f"recipe file {path}: unknown setting {key!r} (the keys are settings' environment "
                          f"variable names, plus {', '.join(RECIPE_META_KEYS)}){hint}")
    if role_of(fields[key]) == "process":
        raise ConfigError(f"recipe file {path}: {key} cannot be set by a recipe: every process reads it "
                          "from its own environment; set it there")
    if not isinstance(value, (str, int, float, bool, dict) if key in MAP_KEYS else (str, int, float, bool)):
        raise ConfigError(f"recipe file {path}: {key} = {value!r}: a value must be a string, a number or "
                          "true/false")


def read_recipe(name: str) -> tuple[dict[str, tuple[Any, Path]], str]:
    """Recipe ``name``'s settings, ``{ENV: (value, file that set it)}`` (an ``extends`` chain resolved, the
    extending file's values winning), and its description. ConfigError names the file, the key and the fix."""
    settings: dict[str, tuple[Any, Path]] = {}
    description = ""
    fields = {env_name(f): f for f in all_fields()}
    for path in reversed(_recipe_chain(name)):    # the base first: each extending file overrides what it extends
        for key, value in _read_recipe_file(str(path), path.stat().st_mtime_ns).items():
            if key == "description":
                if not isinstance(value, str):
                    raise ConfigError(f"recipe file {path}: description must be a string")
                description = value
            elif key not in RECIPE_META_KEYS:
                _check_key(path, key, value, fields)
                settings[key] = (value, path)
    return settings, description


def recipe_name(recipe: str | None) -> str:
    """The recipe in force: ``recipe`` (a ``--recipe`` flag) when given, else the environment's RECIPE, else none."""
    return recipe if recipe is not None else os.environ.get(RECIPE_ENV) or NO_RECIPE


def add_recipe_arg(parser: argparse.ArgumentParser) -> None:
    """``--recipe NAME`` (``rlfh train``, ``rlfh config``): the recipe under the environment and the flags."""
    parser.add_argument(
        "--recipe", default=None, metavar="RECIPE",
        help=f"A recipe: a file of settings, recipes/NAME.toml ({', '.join(available_recipes())}), or a path to "
             f"one; '{NO_RECIPE}': the defaults. Flags and environment variables beat its values. [env "
             f"{RECIPE_ENV}; default: {NO_RECIPE}; `make train` runs main]")
