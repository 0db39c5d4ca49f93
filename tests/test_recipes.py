"""Recipes: named files of settings in recipes/, between the defaults and the environment (flag > env > recipe >
default), the same for `rlfh train --recipe`, `RECIPE=`, `rlfh config --recipe` and `scripts/train.sh NAME`."""
import argparse
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from core.config import (NO_RECIPE, RENAMED_SETTINGS, ConfigError, DemoSettings, ProcessSettings, RLFHConfig,
                         ServiceSettings, available_recipes, env_name, read_recipe)

ROOT = Path(__file__).resolve().parents[1]

#: What scripts/train.sh exported for `make train` before recipes were files (its `${VAR:-...}` lines at commit
#: c1e5b8a, applied when MODEL_PATH is the embedded model, no GPU is asked for and no Ray cluster is joined),
#: captured by running that block of the script in an empty environment. The names are those of that commit
#: (OUTCOME_ABSTAIN is ABSTAIN_OUTCOME_REWARD now, OUTCOME_JUDGE is OUTCOME_GRADER).
MAKE_TRAIN_BEFORE = {
    "PROMPT_DATA": "halueval:train", "PROMPT_MODE": "mixed", "EVIDENCE_SHARE": "0.15", "TYPE_BALANCE": "0.25",
    "ADVANTAGE_ESTIMATOR": "rloo", "KL_COEF": "0.1", "TEMPERATURE": "0.7",
    "OUTCOME_REWARD": "ternary", "OUTCOME_JUDGE": "gold", "OUTCOME_ABSTAIN": "-0.6", "TOKEN_REWARD_WEIGHT": "0",
    "ABSTAIN_SAMPLES": "1",
    "ROLLOUT_BATCH_SIZE": "16", "N_SAMPLES_PER_PROMPT": "4", "TRAIN_BATCH_SIZE": "64", "MICRO_TRAIN_BATCH_SIZE": "8",
    "ACTOR_LR": "5e-6", "MAX_STEPS": "12", "GENERATE_MAX_LEN": "40",
    "DEV_EVAL_STEP": "2", "DEV_EVAL_SIZE": "64", "DEV_EVAL_TYPE_SHARE": "0.25", "DEV_EVAL_MODES": "closed",
    "FINAL_MODEL": "best", "DEV_SELECT_MAX_INCORRECT": "0.25", "EARLY_STOP_PATIENCE": "1",
    "WARM_START": "probed", "WARM_START_TYPE_BALANCE": "0.4", "WARM_START_EPOCHS": "3", "HELDOUT_REPORT": "1",
}

#: What scripts/demo.sh's gate recipe used before (its `${VAR:-...}` lines at c1e5b8a; its seed was ${SEED:-0}).
GATE_BEFORE = {"GATE_QUESTIONS": 320, "GATE_TYPE_SHARE": 0.3, "GATE_LR": 3e-5, "GATE_EPOCHS": 1,
               "GATE_SELECT_DATA": "halueval:dev", "GATE_SELECT_LIMIT": 200, "SEED": 0, "PROMPT_DATA": "halueval:train"}


def test_the_abstention_recipe_is_exactly_what_make_train_ran_before():
    """The closed-book recipe (make train's until it became the grounded one) gets the same effective settings as
    when train.sh exported them: every setting, not only the 30."""
    before = RLFHConfig.load({RENAMED_SETTINGS.get(k, k): v for k, v in MAKE_TRAIN_BEFORE.items()})
    assert before.abstain_outcome_reward == -0.6
    assert RLFHConfig.load({}, recipe="abstain-closed-book") == before
    assert RLFHConfig.load({"RECIPE": "abstain-closed-book"}) == before   # RECIPE= in the environment, as train.sh sets it
    settings, description = read_recipe("abstain-closed-book")
    assert set(settings) == {RENAMED_SETTINGS.get(k, k) for k in MAKE_TRAIN_BEFORE} and description


#: What recipes/main.toml changes of the grounded recipe: its size (30 minutes on 2 CPU cores), nothing else.
MAIN_SIZING = {"WARM_START_QUESTIONS": 128, "MAX_STEPS": 4, "HELDOUT_LIMIT": 0,
               "HELDOUT_EVIDENCE_LIMIT": 150}


def test_the_main_recipe_is_the_grounded_recipe_sized_for_a_laptop():
    main, main_description = read_recipe("main")
    grounded, _ = read_recipe("grounded")
    assert {k: v for k, (v, _) in main.items()} == {**{k: v for k, (v, _) in grounded.items()}, **MAIN_SIZING}
    assert {k for k, (_, path) in main.items() if path.stem == "main"} == set(MAIN_SIZING) and main_description
    cfg = RLFHConfig.load({}, recipe="main")
    assert cfg == RLFHConfig.load({"RECIPE": "main"}) != RLFHConfig.load({})
    # the product's method is on in the main job: the verifier's token-level rewards, checked against the passage
    assert (cfg.token_reward_weight, cfg.granularity, cfg.prompt_mode, cfg.heldout_gate) == \
        (1.0, "token", "evidence", "grounded")


def test_the_gate_recipe_is_what_demo_sh_used_before():
    cfg = RLFHConfig.load({}, recipe="gate")
    assert {env: getattr(cfg, f) for f in [*DemoSettings.model_fields, "seed", "prompt_data"]
            for env in [env_name(f)]} == GATE_BEFORE


def test_every_recipe_file_loads():
    assert {"main", "abstain-closed-book", "gate"} <= set(available_recipes())
    for name in available_recipes():
        RLFHConfig.load({}, recipe=name)
        assert read_recipe(name)[1], f"recipes/{name}.toml has no description"


def test_precedence_flag_over_env_over_recipe_over_default():
    env = {"RECIPE": "main", "ACTOR_LR": "1e-5", "MAX_STEPS": "20"}
    cfg = RLFHConfig.load(env, max_steps=3)
    assert (cfg.max_steps, cfg.actor_lr, cfg.kl_coef, cfg.seed) == (3, 1e-5, 0.05, 42)
    sources = RLFHConfig.sources(env, max_steps=3)
    assert sources["max_steps"] == "flag" and sources["actor_lr"] == "env"
    assert sources["kl_coef"] == "recipe:grounded" and sources["seed"] == "default"
    # the recipe argument (--recipe) beats RECIPE in the environment; 'none' is the defaults
    assert RLFHConfig.load({"RECIPE": "main"}, recipe=NO_RECIPE) == RLFHConfig.load({})
    assert set(RLFHConfig.sources({"RECIPE": "main"}, recipe=NO_RECIPE).values()) == {"default"}


def test_an_empty_variable_empties_a_recipe_value_only_where_empty_is_a_value():
    """DEV_SELECT_MAX_INCORRECT is "a share or empty": set empty, it beats the recipe (train.sh's
    ${DEV_SELECT_MAX_INCORRECT-0.25} did the same); MAX_STEPS= empty is unset, as everywhere else."""
    cfg = RLFHConfig.load({"RECIPE": "abstain-closed-book", "DEV_SELECT_MAX_INCORRECT": "", "MAX_STEPS": ""})
    assert cfg.dev_select_max_incorrect is None and cfg.max_steps == 12


def test_rlfh_train_recipe_flag_is_the_same_as_the_environment():
    from rlfh.cli import build_parser
    args = build_parser().parse_args(["train", "--recipe", "main", "--max-steps", "3"])
    cfg = RLFHConfig.from_args(args, environ={})
    assert cfg == RLFHConfig.load({"RECIPE": "main"}, max_steps=3)
    assert cfg.max_steps == 3 and cfg.warm_start == "grounded"
    args = build_parser().parse_args(["train"])
    assert RLFHConfig.from_args(args, environ={"RECIPE": "gate"}).gate_questions == 320


def test_unknown_recipe_names_the_recipes_and_the_fix():
    with pytest.raises(ConfigError) as e:
        RLFHConfig.load({}, recipe="mian")
    msg = str(e.value)
    assert "RECIPE (--recipe) = 'mian'" in msg and "main" in msg and "abstain-closed-book" in msg and "'none'" in msg
    with pytest.raises(ConfigError, match="no such recipe file"):
        RLFHConfig.load({"RECIPE": "/nowhere/r.toml"})


@pytest.mark.parametrize("text,needle", [
    ('ACTOR_LRR = 1e-6\n', "unknown setting 'ACTOR_LRR'"),
    ('actor_lr = 1e-6\n', "here ACTOR_LR"),
    ('RLFH_CACHE_DIR = "/tmp/x"\n', "RLFH_CACHE_DIR cannot be set by a recipe"),
    ('ACTOR_LR = [1, 2]\n', "a value must be a string, a number or true/false"),
    ('ACTOR_LR = 1e-6\nACTOR_LR = 2e-6\n', "not valid TOML"),
    ('extends = "nope"\n', "RECIPE (--recipe) = 'nope'"),
    ('extends = 3\n', "must be the name of another recipe"),
])
def test_a_bad_recipe_file_names_the_file_the_key_and_the_fix(tmp_path, text, needle):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        RLFHConfig.load({}, recipe=str(path))
    assert needle in str(e.value) and (needle.startswith("RECIPE") or str(path) in str(e.value)), str(e.value)


def test_a_bad_value_in_a_recipe_names_the_variable_and_the_file(tmp_path):
    path = tmp_path / "fast.toml"
    path.write_text('ACTOR_LR = "fast"\n')
    with pytest.raises(ConfigError) as e:
        RLFHConfig.load({}, recipe=str(path))
    assert "ACTOR_LR (--actor-lr) = 'fast'" in str(e.value) and str(path) in str(e.value)


def test_a_recipe_extends_another_and_overrides_it(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "main"\nMAX_STEPS = 30\n')
    cfg = RLFHConfig.load({}, recipe=str(tmp_path / "a.toml"))
    assert cfg.max_steps == 30 and cfg.actor_lr == 5e-6
    sources = RLFHConfig.sources({}, recipe=str(tmp_path / "a.toml"))
    assert sources["max_steps"] == f"recipe:{tmp_path / 'a.toml'}" and sources["actor_lr"] == "recipe:grounded"
    (tmp_path / "b.toml").write_text(f'extends = "{tmp_path / "c.toml"}"\n')
    (tmp_path / "c.toml").write_text(f'extends = "{tmp_path / "b.toml"}"\n')
    with pytest.raises(ConfigError, match="'extends' loops"):
        RLFHConfig.load({}, recipe=str(tmp_path / "b.toml"))


def test_sections_take_only_their_settings_from_a_recipe():
    """A service replica (ServiceSettings) with RECIPE in its environment gets none of the recipe's trainer settings,
    and the process settings, read in every process, never read the recipe file."""
    assert ServiceSettings.load({"RECIPE": "main"}) == ServiceSettings.load({})
    assert ProcessSettings.load({"RECIPE": "no-such-recipe"}) == ProcessSettings.load({})


def test_rlfh_config_prints_each_value_and_where_it_came_from(monkeypatch, capsys):
    from rlfh.cli import main
    monkeypatch.delenv("RECIPE", raising=False)
    monkeypatch.setenv("ACTOR_LR", "1e-5")
    assert main(["config", "--recipe", "main", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["KL_COEF"]["value"] == "0.05" and out["KL_COEF"]["source"] == "recipe:grounded"
    assert out["ACTOR_LR"]["source"] == "env" and out["SEED"]["source"] == "default"
    assert main(["config", "--recipe", "main"]) == 0
    table = capsys.readouterr().out
    assert "recipe:grounded" in table and "recipe main" in table
    assert main(["config", "--recipe", "mian"]) == 2
    assert "'mian'" in capsys.readouterr().err


def _launcher_lines(script: str) -> str:
    return (ROOT / "scripts" / script).read_text(encoding="utf-8")


def test_train_sh_sets_no_setting_itself():
    """The recipe lives in one place, its file: train.sh neither defaults nor exports any setting of the config."""
    # the code, not the comments' examples; the held-out stage is its own script
    sh = re.sub(r"#.*", "", _launcher_lines("train.sh") + _launcher_lines("heldout_report.sh"))
    settings = {env_name(f) for f in RLFHConfig.model_fields}
    defaulted = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*):?-", sh)) & settings
    exported = set(re.findall(r"export ([A-Z][A-Z0-9_]*)=", sh)) & settings
    assigned = set(re.findall(r"(?:^|[\s;])([A-Z][A-Z0-9_]*)=(?!\$\(setting )", sh, flags=re.M)) & settings
    # what it may still read from the environment: which recipe suits the launch (the model, GPUs, a cluster)
    assert defaulted <= {"MODEL_PATH", "ACTOR_NUM_GPUS_PER_NODE", "RAY_ADDRESS"}, defaulted
    # MODEL_PATH: the RL stage trains from the warm start train.sh built (a launcher mechanic, not a recipe value)
    assert exported <= {"MODEL_PATH"} and assigned <= {"MODEL_PATH"}, (exported, assigned)


def _run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "RECIPE"}
    return subprocess.run(["bash", f"scripts/{script}", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**full, **env})


def test_train_sh_takes_the_recipe_as_its_first_argument_or_from_recipe():
    r = _run("train.sh", "mian")
    assert r.returncode == 2 and "RECIPE (--recipe) = 'mian'" in r.stderr and "[train.sh] bad configuration" in r.stderr
    r = _run("train.sh", RECIPE="nope")
    assert r.returncode == 2 and "'nope'" in r.stderr
    r = _run("train.sh", "main", "--recipe", "gate")
    assert r.returncode == 2 and "first argument" in r.stderr


def test_demo_sh_names_the_renamed_recipe_and_settings():
    r = _run("demo.sh", DEMO_RECIPE="grpo")
    assert r.returncode == 2 and "DEMO_RECIPE=abstain-closed-book" in r.stderr
    r = _run("demo.sh", DEMO_RECIPE="gate", SELECT_LIMIT="100")
    assert r.returncode == 2 and "GATE_SELECT_LIMIT" in r.stderr


def test_demo_sh_reads_the_gate_recipe_through_the_config():
    sh = _launcher_lines("demo.sh")
    assert "RECIPE=gate \"$RLFH\" config --format env" in sh
    for f in DemoSettings.model_fields:
        assert f"gate_setting {env_name(f)})" in sh, env_name(f)
    assert not set(re.findall(r"\$\{(GATE_[A-Z_]+):?-", sh)), "demo.sh must not default the gate recipe's settings"


def test_an_old_setting_name_in_a_recipe_names_the_new_one(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("OUTCOME_ABSTAIN = -0.5\n")
    with pytest.raises(ConfigError) as e:
        RLFHConfig.load({}, recipe=str(path))
    assert str(path) in str(e.value) and "OUTCOME_ABSTAIN (a recipe key) was renamed ABSTAIN_OUTCOME_REWARD" in str(
        e.value)
