"""The machinery every settings class shares: :func:`setting` declares a field (its variable, its short help, its
longer reference), :class:`Settings` reads fields from flags, the environment, a recipe and the defaults, and says
what is wrong with a bad value, naming the variable.

A settings class declares the fields of one role (``ROLE``): the model, the rollout, the policy, the critic, the
reward, the verifier, the services, the placement, the evaluation, the trainer's run, and the environment-only
sections of every process, scripts/train.sh and scripts/demo.sh. The role is the class's, so a field's place in
``rlfh config``, ``--help`` and docs/CONFIG.md is where it is defined.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import typing
from typing import Any, ClassVar, Iterable, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from typing_extensions import Self   # typing.Self from Python 3.11; pydantic depends on typing_extensions

from core.errors import ConfigError
from core.recipes import NO_RECIPE, RECIPE_ENV, read_recipe, recipe_label, recipe_path
from core.settings.names import (RENAMED_DEST, all_fields, env_name, field_of_env, flag_name, has_flag, refuse_renamed,
                                 register, renamed_fields, role_of, setting_label)

#: The roles, in the order settings are listed (``rlfh config``, ``--help``, docs/CONFIG.md): the trainer's parts as
#: verl groups its config, then the sections read from the environment only.
ROLES = ("model", "rollout", "policy", "critic", "reward", "verifier", "service", "placement", "evaluation",
         "trainer", "process", "launcher", "demo")

#: What a *_NODE_RESOURCE setting may be: empty, or a Ray custom resource name (letters, digits, ``_ - . :``).
NODE_RESOURCE_PATTERN = r"^[A-Za-z0-9_.:-]*$"


def setting(default: Any, help: str, env: Optional[str] = None, cli: bool = True, doc: str = "", **kw) -> Any:
    """A settings field: its default, its ``help`` (one or two lines: ``--help`` and ``rlfh config`` print it), its
    environment variable ``env`` (default: the field's name in capitals) and ``doc``, a longer reference that only
    docs/CONFIG.md prints. Other keywords are pydantic constraints (``ge``, ``gt``, ``pattern``...).

    ``cli=False``: no command-line flag, only the environment variable (a setting every process reads from its
    own environment, see ``ProcessSettings``: a flag would reach only the process it was given to).
    """
    extra: dict[str, Any] = {}
    if env:
        extra["env"] = env
    if not cli:
        extra["cli"] = False
    if doc:
        extra["doc"] = doc
    return Field(default, description=help, json_schema_extra=extra, **kw)


def _finite(name: str, v: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    return v


def loads_map(text: str) -> Any:
    """A map as JSON text, or as a Python dict literal in single quotes, the way the RLFH authors' launch script
    writes it (``VERIFICATION_MAP={'Correct':0.45,...}``, ``INFORMATIVE_MAP={'5':1.25,...}``): read by
    ``ast.literal_eval``, which evaluates literals only. A text neither reads raises JSON's error."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        try:
            data = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            data = None
        if isinstance(data, dict):
            return data
        raise


def parse_score_map(value: Any, defaults: dict[str, float], keys: tuple[str, ...], what: str) -> dict[str, float]:
    """A JSON object (or mapping) of ``key -> number`` merged over ``defaults``; ValueError names the bad key.

    Keys are compared as strings (``{5: 1.0}`` is score ``"5"``); values must be finite numbers (not bool).
    """
    data = loads_map(value) if isinstance(value, str) else value
    if not isinstance(data, Mapping):
        raise ValueError(f"must be a JSON object mapping {what} to numbers, got {type(data).__name__}")
    out = dict(defaults)
    for k, v in data.items():
        key = str(k)
        if key not in keys:
            raise ValueError(f"unknown {what[:-1] if what.endswith('s') else what} {k!r}; "
                             f"{what} are {', '.join(keys)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"value for {key!r} must be a number, got {v!r}")
        out[key] = _finite(key, float(v))
    return out


class Settings(BaseModel):
    """Settings read from environment variables and CLI flags: the machinery every section shares.

    Field name == lower-case env var (unless ``env`` says otherwise). A bad value raises :class:`ConfigError`.
    A subclass that declares fields names their role in ``ROLE``.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    #: The role of the fields this class declares (one of :data:`ROLES`); a class that only composes others has none.
    ROLE: ClassVar[str] = ""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        own = cls.__dict__.get("__annotations__", {})
        for name in own:
            if name in cls.model_fields and not name.startswith("_"):
                if not cls.ROLE:
                    raise TypeError(f"{cls.__name__} declares setting {name} but names no ROLE")
                info = cls.model_fields[name]
                info.json_schema_extra = {**(info.json_schema_extra or {}), "role": cls.ROLE}
        register(cls.model_fields)

    @field_validator("*")
    @classmethod
    def _finite_floats(cls, v, info):
        """No setting takes NaN or infinity (a NaN learning rate or reward weight would train on garbage)."""
        return _finite(info.field_name, v) if isinstance(v, float) else v

    def to_env(self) -> dict[str, str]:
        """Environment-variable form (for ConfigMaps, runtime envs, subprocesses)."""
        out = {}
        for name, info in type(self).model_fields.items():
            v = getattr(self, name)
            out[env_name(name)] = "" if v is None else json.dumps(v) if isinstance(v, dict) else (
                str(v).lower() if isinstance(v, bool) else str(v))
        return out

    @classmethod
    def load(cls, environ: Optional[Mapping[str, str]] = None, *, recipe: Optional[str] = None,
             **overrides: Any) -> Self:
        """Build from explicit overrides (flags) > the environment (``os.environ`` by default) > the recipe
        (``recipe``, else the environment's RECIPE; none by default) > the defaults."""
        raw, sources = cls.layers(environ, recipe=recipe, **overrides)
        try:
            return cls(**raw)
        except ValidationError as e:
            raise ConfigError(explain(e, raw, sources)) from None

    @classmethod
    def sources(cls, environ: Optional[Mapping[str, str]] = None, *, recipe: Optional[str] = None,
                **overrides: Any) -> dict[str, str]:
        """Where each setting's value comes from: ``default``, ``recipe:NAME``, ``env`` or ``flag``."""
        return cls.layers(environ, recipe=recipe, **overrides)[1]

    @classmethod
    def layers(cls, environ: Optional[Mapping[str, str]] = None, *, recipe: Optional[str] = None,
               **overrides: Any) -> tuple[dict[str, Any], dict[str, str]]:
        """The raw values :meth:`load` validates, and where each came from (see :meth:`sources`)."""
        environ = os.environ if environ is None else environ
        refuse_renamed([k for k, v in environ.items() if v != ""], "environment variable")
        raw: dict[str, Any] = {}
        sources = {name: "default" for name in cls.model_fields}
        name = recipe if recipe is not None else environ.get(RECIPE_ENV, "")
        # a section no recipe can set (the process settings, read in every process) does not read the file
        if name and name != NO_RECIPE and any(role_of(f) != "process" for f in cls.model_fields):
            recipe_settings, _ = read_recipe(name)
            for env, (value, path) in recipe_settings.items():
                field = field_of_env(env)
                if field in cls.model_fields:
                    raw[field] = _coerce_recipe(field, cls.model_fields[field].annotation, value)
                    sources[field] = recipe_label(path)
        for field, info in cls.model_fields.items():
            text = environ.get(env_name(field))
            if text is None or (text == "" and not (field in raw and _is_optional(info.annotation))):
                continue       # unset; an empty variable counts as unset, except that it empties a recipe's value
            raw[field] = None if text == "" else _coerce_env(field, info.annotation, text)
            sources[field] = "env"
        for field, value in overrides.items():
            if value is not None:
                raw[field] = value
                sources[field] = "flag"
        return raw, sources

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser, groups: Optional[set[str]] = None,
                     exclude: Iterable[str] = ()) -> None:
        """Add one ``--flag`` per setting (help shows the env var and default), one argument group per role.

        ``groups``: only settings of these roles (all when None). ``exclude``: field names to leave out
        (settings the command does not read, so that its ``--help`` lists only what it uses).
        """
        by_role: dict[str, argparse._ArgumentGroup] = {}
        skip = set(exclude)
        renamed = renamed_fields()
        for name, info in ordered_fields(cls):
            role = role_of(name)
            if (groups is not None and role not in groups) or name in skip or not has_flag(name):
                continue
            g = by_role.setdefault(role, parser.add_argument_group(f"{role} settings"))
            default = info.default
            shown = json.dumps(default) if isinstance(default, dict) else default
            g.add_argument(
                flag_name(name), dest=name, default=None, metavar=env_name(name),
                # argparse %-formats help text: a literal "%" in a description must reach it as "%%"
                help=f"{info.description} [env {env_name(name)}; default: {shown!s}]".replace("%", "%%"))
            for old_field in (o for o, n in renamed.items() if n == name):   # refused with the new name
                g.add_argument(flag_name(old_field), dest=RENAMED_DEST + old_field, default=None,
                               help=argparse.SUPPRESS)

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Optional[Mapping[str, str]] = None) -> Self:
        """Flags (``args``) > environment > recipe (``args.recipe`` where the command has ``--recipe``) > defaults."""
        return cls.load(environ, recipe=getattr(args, "recipe", None), **cls.flag_overrides(args))

    @classmethod
    def flag_overrides(cls, args: argparse.Namespace) -> dict[str, Any]:
        """The settings given as flags in ``args``; an old, renamed flag is a ConfigError naming the new one."""
        renamed = renamed_fields()
        old = [flag_name(f) for f in renamed if getattr(args, RENAMED_DEST + f, None) is not None]
        if old:
            raise ConfigError("renamed flags:\n  " + "\n  ".join(
                f"{o} was renamed {flag_name(renamed[o[2:].replace('-', '_')])}" for o in old))
        overrides = {}
        for name, info in cls.model_fields.items():
            v = getattr(args, name, None)
            if v is not None:
                overrides[name] = _coerce_env(name, info.annotation, v) if isinstance(v, str) else v
        return overrides

    @classmethod
    def of(cls, settings: "Settings") -> Self:
        """This section of a larger one (e.g. the service settings of a training config, or its policy settings)."""
        if type(settings) is cls:
            return settings
        return cls(**{name: getattr(settings, name) for name in cls.model_fields})


def ordered_fields(cls: type[BaseModel]) -> list[tuple[str, Any]]:
    """``(name, FieldInfo)`` of a settings class, by role (:data:`ROLES`), then as defined."""
    def rank(item):
        role = role_of(item[0])
        return ROLES.index(role) if role in ROLES else len(ROLES)
    return sorted(cls.model_fields.items(), key=rank)


def _coerce_env(name: str, annotation: Any, text: str) -> Any:
    """Strings from the environment to the field's type; pydantic does the rest."""
    if annotation is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{setting_label(name)} = {text!r}: must be true/false (or 1/0)")
    if name in ("verification_map", "informative_map"):
        try:
            return loads_map(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{setting_label(name)}: not valid JSON ({e.msg} at char {e.pos}), nor a Python dict "
                              "literal; expected e.g. '{\"Correct\": 1.0, \"Wrong\": -1.0}' or "
                              "\"{'Correct': 1.0, 'Wrong': -1.0}\"") from None
    return text


def _is_optional(annotation: Any) -> bool:
    """A "... or empty" setting: an empty value is one of its values (None), not "unset"."""
    return type(None) in typing.get_args(annotation)


def _coerce_recipe(name: str, annotation: Any, value: Any) -> Any:
    """A recipe file's TOML value to what the field takes: text as from the environment, "" as empty."""
    if isinstance(value, str):
        return None if value == "" and _is_optional(annotation) else _coerce_env(name, annotation, value)
    return value


def explain(err: ValidationError, raw: dict[str, Any], sources: Optional[dict[str, str]] = None) -> str:
    """A pydantic error as the lines of a ConfigError, each naming the variable, its flag and the recipe file."""
    lines = []
    for e in err.errors():
        loc = e["loc"][0] if e["loc"] else None
        msg = e["msg"].removeprefix("Value error, ")
        if loc in all_fields():
            ctx = e.get("ctx") or {}
            accepts = ""
            if "expected" in ctx and str(ctx["expected"]) not in msg:
                accepts = f" (accepts {ctx['expected']})"
            source = (sources or {}).get(loc, "")
            where = f" (set by recipe file {recipe_path(source.removeprefix('recipe:'))})" if source.startswith(
                "recipe:") else ""
            lines.append(f"{setting_label(loc)} = {raw.get(loc)!r}{where}: {msg}{accepts}")
        else:
            lines.append(msg)
    return "bad configuration:\n  " + "\n  ".join(lines)
