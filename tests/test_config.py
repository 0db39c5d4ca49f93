"""The typed config: env parsing, CLI precedence, and errors that name the variable and the fix."""
import argparse
import json
import re

import pytest

from core.config import (DEFAULT_INFORMATIVE_MAP, DEFAULT_VERIFICATION_MAP, ConfigError, DemoSettings,
                         LauncherSettings, RLFHConfig, describe_settings, env_name)


def test_defaults_load_from_empty_environment():
    cfg = RLFHConfig.load({})
    assert cfg.model_path == "smollm2-135m-instruct"
    assert cfg.verification_map == DEFAULT_VERIFICATION_MAP
    assert cfg.informative_map == DEFAULT_INFORMATIVE_MAP


def test_env_values_are_typed():
    cfg = RLFHConfig.load({"ACTOR_LR": "3e-6", "N_SAMPLES_PER_PROMPT": "4", "FSPO": "true",
                           "GRANULARITY": "sentence", "VERIFICATION_MAP": '{"Wrong": -2}',
                           "INFORMATIVE_MAP": '{"5": 1.5}'})
    assert cfg.actor_lr == 3e-6 and cfg.n_samples_per_prompt == 4 and cfg.fspo is True
    assert cfg.granularity == "sentence"
    assert cfg.verification_map["Wrong"] == -2.0
    assert cfg.verification_map["Correct"] == DEFAULT_VERIFICATION_MAP["Correct"]  # unspecified labels keep defaults
    assert cfg.informative_map["5"] == 1.5


@pytest.mark.parametrize("env,needle", [
    ({"GRANULARITY": "tokens"}, "GRANULARITY (--granularity)"),
    ({"ACTOR_LR": "fast"}, "ACTOR_LR"),
    ({"ACTOR_LR": "-1"}, "greater than 0"),
    ({"VERIFICATION_MAP": '{"Maybe": 1}'}, "unknown label"),
    ({"VERIFICATION_MAP": '{"Correct": "high"}'}, "must be a number"),
    ({"VERIFICATION_MAP": "{not json"}, "not valid JSON"),
    ({"INFORMATIVE_MAP": '{"7": 1}'}, "unknown informativeness score"),
    ({"INFO_WEIGHT": "nan"}, "finite"),
    ({"FSPO": "maybe"}, "true/false"),
    ({"ADVANTAGE_ESTIMATOR": "grpo", "N_SAMPLES_PER_PROMPT": "1"}, "N_SAMPLES_PER_PROMPT >= 2"),
    ({"VERIFIER_BACKEND": "llm"}, "MODEL_URL"),
    ({"VERIFICATION_MAP": "[1, 2]"}, "VERIFICATION_MAP (--verification-map)"),
    ({"INFORMATIVE_MAP": '"5"'}, "must be a JSON object"),
    ({"LOSS_AGG": "sum"}, "LOSS_AGG (--loss-agg)"),
    ({"EPS_CLIP_HIGH": "0"}, "EPS_CLIP_HIGH"),
    ({"EPS_CLIP_HIGH": "inf"}, "finite"),
    ({"HELDOUT_LIMIT": "0"}, "HELDOUT_GATE=selective judges the questions HELDOUT_LIMIT counts"),
    ({"HELDOUT_GATE": "grounded", "HELDOUT_EVIDENCE_LIMIT": "0"}, "set HELDOUT_EVIDENCE_LIMIT >= 1"),
    ({"HELDOUT_EVIDENCE_LIMIT": "-1"}, "HELDOUT_EVIDENCE_LIMIT"),
])
def test_bad_values_name_the_variable(env, needle):
    with pytest.raises(ConfigError) as e:
        RLFHConfig.load(env)
    assert needle in str(e.value)


def test_a_heldout_half_the_gate_does_not_read_may_be_skipped():
    assert RLFHConfig.load({"HELDOUT_GATE": "grounded", "HELDOUT_LIMIT": "0"}).heldout_limit == 0
    assert RLFHConfig.load({"HELDOUT_EVIDENCE_LIMIT": "0"}).heldout_evidence_limit == 0


@pytest.mark.parametrize("override", [{"verification_map": 5}, {"verification_map": [1, 2]},
                                      {"informative_map": ["5", 1.0]}, {"informative_map": {"5": True}}])
def test_bad_map_objects_are_config_errors_not_crashes(override):
    """A map given as a Python object (a caller's override, not JSON text) of the wrong type names the field."""
    name = next(iter(override))
    with pytest.raises(ConfigError, match=name.upper()):
        RLFHConfig.load({}, **override)


def test_secrets_are_masked_when_printed(monkeypatch, capsys):
    from rlfh.cli import main
    from core.config import SECRET_ENVS, masked_value, redact_url
    assert set(SECRET_ENVS) == {"REWARD_API_TOKEN", "MODEL_API_KEY", "REDIS_URL"}
    assert redact_url("redis://:p@ss@cache:6379/0") == "redis://***@cache:6379/0"
    assert redact_url("redis://cache:6379/0") == "redis://cache:6379/0"
    assert masked_value("MODEL_API_KEY", "sk-123") == "***" and masked_value("MODEL_API_KEY", "") == ""
    assert masked_value("GRANULARITY", "sentence") == "sentence"
    monkeypatch.setenv("REDIS_URL", "redis://user:hunter2@cache:6379/0")
    monkeypatch.setenv("REWARD_API_TOKEN", "tok-hunter2")
    for fmt in ("json", "table"):
        assert main(["config", "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "hunter2" not in out, fmt
        assert "cache:6379" in out, fmt          # the host is still shown: which Redis is configured
    assert main(["config", "--format", "env"]) == 0   # the .env form is the one that keeps values
    assert "REWARD_API_TOKEN=tok-hunter2" in capsys.readouterr().out


def test_positive_int_rejects_zero_and_text():
    from core.config import positive_int
    assert positive_int("3") == 3
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)


def test_add_cli_args_exclude_leaves_settings_out():
    parser = argparse.ArgumentParser()
    RLFHConfig.add_cli_args(parser, groups={"service"}, exclude=("reward_url",))
    dests = {a.dest for a in parser._actions}
    assert "redis_url" in dests and "reward_url" not in dests and "actor_lr" not in dests


def test_rlfh_serve_offers_only_the_settings_the_service_reads():
    from reward_service.cli import add_parser
    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    dests = {a.dest for a in sub.choices["serve"]._actions}
    assert {"granularity", "verification_map", "reward_clip", "reward_tokenizer", "redis_url"} <= dests
    # trainer-side reward settings (the service never reads them) and the trainer's client settings are not flags
    assert not dests & {"outcome_reward", "abstain_samples", "token_reward_weight", "reward_url", "reward_timeout_s"}


#: Settings the code reads through an RLFHConfig property or method that resolves them (the name it uses).
READ_VIA = {"critic_pretrain": "effective_critic_pretrain", "ckpt_path": "effective_ckpt_path",
            "loss_agg": "policy_loss_kwargs", "eps_clip_high": "policy_loss_kwargs"}


def test_every_setting_is_read_outside_the_config_module():
    """A setting that is validated and documented but never reaches code is a bug (issue 13's audit): each one is
    read as ``cfg.<name>`` / ``getattr(cfg, "<name>")`` (or through the property in READ_VIA) somewhere in the
    project's packages outside the settings' own modules (core/config.py, core/settings/). Catches a new setting
    nobody wires (LOSS_AGG was one)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    read = set()
    for pkg in ("core", "actors", "cluster", "reward_service", "verifier_service", "evaluation", "integrations",
                "baselines", "bench"):
        for path in (root / pkg).rglob("*.py"):
            rel = path.relative_to(root).as_posix()
            if rel == "core/config.py" or rel.startswith("core/settings/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute):
                    read.add(node.attr)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    read.add(node.value)    # getattr(cfg, "<name>"), or a table of names read with getattr
                    #                         (core.placement.NODE_RESOURCE_SETTINGS)
    # scripts/train.sh's own settings are read by train.sh, from `rlfh config`'s validated values; the gate
    # baseline's by scripts/demo.sh, the same way
    launcher, demo = set(LauncherSettings.model_fields), set(DemoSettings.model_fields)
    unread = [env_name(f) for f in RLFHConfig.model_fields
              if f not in launcher | demo and READ_VIA.get(f, f) not in read]
    assert unread == []
    sh = "".join((root / "scripts" / s).read_text(encoding="utf-8") for s in ("train.sh", "heldout_report.sh"))
    assert [env_name(f) for f in launcher if f"setting {env_name(f)})" not in sh] == []
    demo_sh = (root / "scripts" / "demo.sh").read_text(encoding="utf-8")
    assert [env_name(f) for f in demo if f"gate_setting {env_name(f)})" not in demo_sh] == []


def test_cli_flag_beats_environment():
    parser = argparse.ArgumentParser()
    RLFHConfig.add_cli_args(parser)
    args = parser.parse_args(["--actor-lr", "5e-6", "--granularity", "response"])
    cfg = RLFHConfig.from_args(args, {"ACTOR_LR": "1e-5", "CRITIC_LR": "2e-5"})
    assert cfg.actor_lr == 5e-6 and cfg.granularity == "response" and cfg.critic_lr == 2e-5


def test_loss_agg_defaults_to_the_estimators_own():
    assert RLFHConfig.load({}).policy_loss_kwargs() == {"eps_clip_high": None, "loss_agg": "token-mean",
                                                        "norm_length": 64}
    dr = RLFHConfig.load({"ADVANTAGE_ESTIMATOR": "dr_grpo", "GENERATE_MAX_LEN": "48", "EPS_CLIP_HIGH": "0.28"})
    assert dr.policy_loss_kwargs() == {"eps_clip_high": 0.28, "loss_agg": "seq-mean-token-sum-norm",
                                       "norm_length": 48}
    assert RLFHConfig.load({"ADVANTAGE_ESTIMATOR": "dr_grpo", "LOSS_AGG": "token-mean"}).effective_loss_agg == \
        "token-mean"


def test_to_env_round_trips():
    cfg = RLFHConfig.load({"VERIFICATION_MAP": '{"Wrong": -3}', "FSPO": "1", "KL_COEF": "0.1"})
    again = RLFHConfig.load(cfg.to_env())
    assert again == cfg


def test_every_setting_has_help_and_unique_env():
    rows = describe_settings()
    envs = [r["env"] for r in rows]
    assert len(envs) == len(set(envs))
    assert all(r["help"] for r in rows)
    for paper_name in ["MODEL_PATH", "SAVE_PATH", "CKPT_PATH", "PROMPT_DATA", "GRANULARITY", "VERIFICATION_MAP",
                       "INFORMATIVE_MAP", "INFO_WEIGHT", "ACTOR_LR", "CRITIC_LR", "KL_COEF", "ADVANTAGE_ESTIMATOR",
                       "LAMBD", "ROLLOUT_BATCH_SIZE", "TRAIN_BATCH_SIZE", "MICRO_TRAIN_BATCH_SIZE",
                       "N_SAMPLES_PER_PROMPT", "REF_NUM_NODES", "CRITIC_NUM_NODES", "ACTOR_NUM_NODES",
                       "ACTOR_NUM_GPUS_PER_NODE", "VLLM_NUM_ENGINES", "VLLM_TENSOR_PARALLEL_SIZE",
                       "COLOCATE_ALL_MODELS", "SAVE_STEP", "MAX_CKPT_NUM", "FREEZING_ACTOR_STEPS", "REWARD_URL"]:
        assert paper_name in envs, paper_name
    assert env_name("placement") == "REWARD_PLACEMENT"


def test_rlfh_config_command_reports_bad_env(monkeypatch, capsys):
    from rlfh.cli import main
    monkeypatch.setenv("GRANULARITY", "paragraph")
    assert main(["config"]) == 2
    assert "GRANULARITY" in capsys.readouterr().err
    monkeypatch.delenv("GRANULARITY")
    assert main(["config", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["MODEL_PATH"]["value"] == "smollm2-135m-instruct"


def test_rlfh_serve_refuses_the_self_verifier(capsys):
    """VERIFIER_BACKEND=self needs the policy's rollout engines: only `rlfh train` has them (a usage error here)."""
    from rlfh.cli import main
    assert main(["serve", "--verifier-backend", "self"]) == 2
    assert "only `rlfh train`" in capsys.readouterr().err


def test_the_services_read_only_their_section():
    """A verifier / reward replica builds ServiceSettings, not the training config: a training setting can
    neither break nor reach it, and the Serve config carries no training setting (issue 13)."""
    from core.config import ServiceSettings
    from reward_service import serve_config as sc
    from reward_service.app import config_from_args
    assert set(ServiceSettings.model_fields) < set(RLFHConfig.model_fields)
    bad_for_training = {"ABSTAIN_SAMPLES": "5", "N_SAMPLES_PER_PROMPT": "2", "ACTOR_LR": "nan",
                        "GRANULARITY": "sentence"}
    with pytest.raises(ConfigError):
        RLFHConfig.load(environ=bad_for_training)
    svc = ServiceSettings.load(environ=bad_for_training)
    assert svc.granularity == "sentence" and not hasattr(svc, "abstain_samples")
    full = RLFHConfig.load(environ={"GRANULARITY": "response", "REDIS_URL": "redis://h:1/0", "ACTOR_LR": "1e-3"})
    assert ServiceSettings.of(full).model_dump() == ServiceSettings.load(
        environ={"GRANULARITY": "response", "REDIS_URL": "redis://h:1/0"}).model_dump()
    args = sc.service_args(full)
    assert set(args) <= {env_name(f) for f in ServiceSettings.model_fields} and "ABSTAIN_SAMPLES" not in args
    assert config_from_args(args).granularity == "response"
    with pytest.raises(ConfigError, match="'ABSTAIN_SAMPLES' is a trainer setting; the reward service does not"):
        config_from_args({**args, "ABSTAIN_SAMPLES": "1"})


def test_config_doc_is_generated_from_the_config():
    """docs/CONFIG.md is `config_markdown()`: a setting added, removed or reworded in core/settings/ without
    regenerating it fails here, naming the command that does."""
    from pathlib import Path

    from rlfh.config_doc import CONFIG_DOC_COMMAND, config_markdown
    doc = Path(__file__).resolve().parents[1] / "docs" / "CONFIG.md"
    text = config_markdown()
    assert doc.exists() and doc.read_text(encoding="utf-8") == text, (
        f"docs/CONFIG.md differs from the settings: run `{CONFIG_DOC_COMMAND}` and commit docs/CONFIG.md")
    for name in RLFHConfig.model_fields:          # every setting is in it, once
        assert text.count(f"| `{env_name(name)}` |") == 1, env_name(name)


def test_rlfh_config_markdown_prints_the_config_doc(capsys, monkeypatch):
    from rlfh.cli import main
    from rlfh.config_doc import config_markdown
    monkeypatch.setenv("ACTOR_LR", "3e-6")        # defaults, not the environment's values: the same on every machine
    assert main(["config", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == config_markdown()


def test_process_settings_come_from_the_environment_only():
    """RLFH_CACHE_DIR, RLFH_FORCE_CPU, RLFH_LOG_LEVEL: typed settings every process reads from its own environment
    (`rlfh config` lists them), with no CLI flag (a flag would reach one process only)."""
    from core.config import ProcessSettings, has_flag
    p = ProcessSettings.load({"RLFH_CACHE_DIR": "/tmp/c", "RLFH_FORCE_CPU": "1", "RLFH_LOG_LEVEL": "DEBUG"})
    assert (p.cache_dir, p.force_cpu, p.log_level) == ("/tmp/c", True, "DEBUG")
    assert ProcessSettings.load({}).model_dump() == {"cache_dir": "", "force_cpu": False, "log_level": "INFO"}
    assert set(ProcessSettings.model_fields) < set(RLFHConfig.model_fields)
    parser = argparse.ArgumentParser()
    RLFHConfig.add_cli_args(parser)
    dests = {a.dest for a in parser._actions}
    assert not dests & set(ProcessSettings.model_fields) and {"torch_threads", "pg_ready_timeout_s"} <= dests
    assert not has_flag("cache_dir") and has_flag("torch_threads")
    with pytest.raises(ConfigError) as e:
        ProcessSettings.load({"RLFH_LOG_LEVEL": "loud"})
    assert "RLFH_LOG_LEVEL = 'loud'" in str(e.value) and "--" not in str(e.value)   # no flag to name


def test_process_settings_reach_the_code(monkeypatch, tmp_path):
    from core.assets import cache_dir
    from core.model_loader import default_device
    monkeypatch.setenv("RLFH_CACHE_DIR", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache" and cache_dir().is_dir()
    monkeypatch.setenv("RLFH_FORCE_CPU", "true")
    assert default_device() == "cpu"


@pytest.mark.parametrize("old,new,value", [
    ("OUTCOME_ABSTAIN", "ABSTAIN_OUTCOME_REWARD", "-0.5"),
    ("OUTCOME_ABSTAIN_EVIDENCE", "ABSTAIN_OUTCOME_REWARD_EVIDENCE", "-0.2"),
    ("ABSTAIN_PRICE", "ABSTAIN_OUTCOME_REWARD_MODE", "fixed"),
    ("ABSTAIN_PRICE_MARGIN", "ABSTAIN_OUTCOME_REWARD_MARGIN", "0.1"),
    ("ABSTAIN_PRICE_STEP", "ABSTAIN_TARGET_RATE_STEP", "0.5"),
    ("ABSTAIN_REWARD", "ABSTAIN_TOKEN_REWARD", "-0.3"),
    # issue 62: "judge" is the trained claim judge only; the language model of the llm / self backends is LLM_*
    ("JUDGE_TIMEOUT_S", "LLM_TIMEOUT_S", "30"),
    ("JUDGE_MAX_RETRIES", "LLM_MAX_RETRIES", "1"),
    ("JUDGE_MAX_RPM", "LLM_MAX_RPM", "100"),
    ("JUDGE_MAX_TPM", "LLM_MAX_TPM", "5000"),
    ("JUDGE_MAX_IN_FLIGHT", "LLM_MAX_IN_FLIGHT", "4"),
    ("JUDGE_MAX_WAIT_S", "LLM_MAX_WAIT_S", "10"),
    ("JUDGE_FALLBACK_LABEL", "LLM_FALLBACK_LABEL", "Wrong"),
    ("OUTCOME_JUDGE", "OUTCOME_GRADER", "verifier"),
])
def test_old_names_are_refused_naming_the_new_one(old, new, value):
    """One name family per concept (issues 49 and 62): the abstention settings are ABSTAIN_*, the llm / self
    backends' language model LLM_*, the outcome's grader OUTCOME_GRADER; an old name, as a variable or a flag,
    stops with an error that names its new name (never silently ignored)."""
    from core.config import RENAMED_SETTINGS, ServiceSettings, flag_name, field_of_env
    assert RENAMED_SETTINGS[old] == new and new in {r["env"] for r in describe_settings()}
    assert old not in {r["env"] for r in describe_settings()}
    for section in (RLFHConfig, ServiceSettings):
        with pytest.raises(ConfigError) as e:
            section.load({old: value})
        assert f"{old} (environment variable) was renamed {new}" in str(e.value)
    assert RLFHConfig.load({new: value}).to_env()[new] in (value, str(float(value)) if value[-1].isdigit() else value)
    parser = argparse.ArgumentParser()
    RLFHConfig.add_cli_args(parser)
    old_flag, new_flag = flag_name(old.lower()), flag_name(field_of_env(new))
    assert old_flag not in parser.format_help()            # hidden: --help shows the new name only
    with pytest.raises(ConfigError) as e:
        RLFHConfig.from_args(parser.parse_args([old_flag, value]), environ={})
    assert f"{old_flag} was renamed {new_flag}" in str(e.value)
    assert RLFHConfig.from_args(parser.parse_args([new_flag, value]), environ={}) == RLFHConfig.load({new: value})


def test_rlfh_serve_refuses_the_old_token_reward_flag(capsys):
    from rlfh.cli import main
    assert main(["serve", "--abstain-reward", "0.2"]) == 2
    assert "--abstain-reward was renamed --abstain-token-reward" in capsys.readouterr().err


def test_no_setting_help_carries_a_measurement_or_a_run_tag():
    """Setting help says what a setting does; what it measured lives in docs/PERFORMANCE.md (machine, date,
    command), and run / session tags in no help at all."""
    tag = re.compile(r"\b(W\d+|F\d+|e\d+|[Ss]ession \d+|[Ss]essions \d+)\b")
    measured = re.compile(r"\d(\.\d+)?\s*(x|%|percent|s|ms|GB|MB|min|nats)(?!\w)")
    for r in describe_settings():
        assert not tag.search(r["help"]), (r["env"], tag.search(r["help"]).group(0))
        assert not measured.search(r["help"]), (r["env"], measured.search(r["help"]).group(0))


#: The longest a setting's help may be: two lines of a terminal, as OpenRLHF's flags (the rest goes to ``doc=``,
#: which docs/CONFIG.md prints under the role's table).
HELP_MAX_CHARS = 170


def test_help_is_short_and_the_reference_is_in_the_config_doc():
    from rlfh.config_doc import config_markdown
    from core.config import doc_of
    long = {r["env"]: len(r["help"]) for r in describe_settings() if len(r["help"]) > HELP_MAX_CHARS}
    assert long == {}, f"help over {HELP_MAX_CHARS} characters: move the rest to setting(..., doc=...)"
    text = config_markdown()
    for name in RLFHConfig.model_fields:
        if doc_of(name):
            assert f"- `{env_name(name)}`: {doc_of(name)}" in text, env_name(name)


def test_no_setting_reference_carries_a_measurement_or_a_run_tag():
    """The longer reference (``doc=``) follows the help's rule: what a setting does, measurements in
    docs/PERFORMANCE.md, no run tags, no result claimed without its source."""
    from core.config import doc_of
    tag = re.compile(r"\b(W\d+|F\d+|e\d+|[Ss]ession \d+|[Ss]essions \d+)\b")
    measured = re.compile(r"\d(\.\d+)?\s*(x|%|percent|s|ms|GB|MB|min|nats)(?!\w)")
    for name in RLFHConfig.model_fields:
        doc = doc_of(name)
        assert not tag.search(doc), (env_name(name), tag.search(doc).group(0))
        assert not measured.search(doc), (env_name(name), measured.search(doc).group(0))


def test_each_setting_is_declared_by_the_class_of_its_role():
    """Settings are grouped by role, one class per role (verl's grouping): every field has a role of ROLES, the one
    its class declares, and RLFHConfig composes every class (a role class's view of a config is ``Cls.of(cfg)``)."""
    from core.config import ROLE_CLASSES, ROLES, PolicySettings, role_of
    assert set(ROLE_CLASSES) == set(ROLES)
    declared = {}
    for role, classes in ROLE_CLASSES.items():
        for cls in classes:
            assert cls.ROLE == role and issubclass(RLFHConfig, cls)
            for name in cls.__annotations__:
                if name in cls.model_fields:
                    declared.setdefault(name, role)
    assert declared == {name: role_of(name) for name in RLFHConfig.model_fields}
    cfg = RLFHConfig.load({"ACTOR_LR": "3e-6"})
    assert PolicySettings.of(cfg).actor_lr == 3e-6 and not hasattr(PolicySettings.of(cfg), "critic_lr")


def test_the_recipe_loader_and_the_config_command_sit_outside_core_config():
    """core/config.py is the settings' public face: the recipe loader is core/recipes.py (below the settings, since
    every Settings.load reads RECIPE), the doc generator and `rlfh config` are in the rlfh command package."""
    import core.recipes
    import rlfh.config_cmd
    import rlfh.config_doc
    from core import config
    assert config.read_recipe is core.recipes.read_recipe
    assert not hasattr(config, "config_markdown") and not hasattr(config, "add_parser")
    assert callable(rlfh.config_cmd.add_parser) and callable(rlfh.config_doc.config_markdown)
