"""The typed config: env parsing, CLI precedence, and errors that name the variable and the fix."""
import argparse
import json

import pytest

from cluster.config import (DEFAULT_INFORMATIVE_MAP, DEFAULT_VERIFICATION_MAP, ConfigError, RLFHConfig,
                            describe_settings, env_name)


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
])
def test_bad_values_name_the_variable(env, needle):
    with pytest.raises(ConfigError) as e:
        RLFHConfig.load(env)
    assert needle in str(e.value)


def test_cli_flag_beats_environment():
    parser = argparse.ArgumentParser()
    RLFHConfig.add_cli_args(parser)
    args = parser.parse_args(["--actor-lr", "5e-6", "--granularity", "response"])
    cfg = RLFHConfig.from_args(args, {"ACTOR_LR": "1e-5", "CRITIC_LR": "2e-5"})
    assert cfg.actor_lr == 5e-6 and cfg.granularity == "response" and cfg.critic_lr == 2e-5


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
    from cluster.cli import main
    monkeypatch.setenv("GRANULARITY", "paragraph")
    assert main(["config"]) == 2
    assert "GRANULARITY" in capsys.readouterr().err
    monkeypatch.delenv("GRANULARITY")
    assert main(["config", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["MODEL_PATH"]["value"] == "smollm2-135m-instruct"
