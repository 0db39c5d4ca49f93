#!/usr/bin/env python3
"""GPU smoke test of the actor code paths: rollout -> log-probs/values -> PPO + critic step -> weight sync.

Two modes:

* ``--ray`` (needs Ray, DeepSpeed; vLLM optional): the real groups from :func:`actors.group.create_groups`
  on the GPUs Ray sees (COLOCATE_ALL_MODELS on a single GPU), rollout on vLLM when importable, weight sync
  by :func:`actors.weight_sync.sync_weights` (``cuda_ipc`` when the engines share the policy's GPUs,
  ``nccl`` otherwise, ``object_store`` for HF engines).
* default, in-process (needs only torch + transformers + DeepSpeed): the same actor classes built as plain
  objects in this process on ``cuda:0``; the rollout engine is vLLM when importable, else HF ``generate``;
  weights go engine-ward as a CPU state dict. For machines that have no Ray (the lent GPU boxes).

The model: ``--model`` (a HF folder, or 'smollm2-135m-instruct' where the embedded cache exists), or
``--random-model DIR``: SmolLM2's config + tokenizer from DIR with random weights (the timings are those of
the real architecture). ``--prepare DIR`` (run on the CPU machine) writes that DIR: tokenizer + config of the
embedded model and the wheels a bare CUDA image lacks (deepspeed, pydantic, hjson ...), small enough to carry.

Prints a table of phase timings and a few equality checks; writes JSON to $OUT/gpu_smoke.json when OUT is set.

    python scripts/gpu_smoke.py --prepare build/gpu_smoke            # on the CPU machine
    pip install --no-index --no-deps build/gpu_smoke/wheels/*.whl    # on the GPU machine, then:
    python scripts/gpu_smoke.py --random-model build/gpu_smoke/model --steps 2   # [--ray] [--backend vllm]

``--peer``: the GPU benchmark of issue 29, this trainer's GRPO step against TRL GRPOTrainer's in one run (the
phase table, the ratio, peak memory, tokens/s next to the memory-bandwidth bound), e.g.

    python scripts/gpu_smoke.py --random-model build/gpu_smoke/model --peer --prompts 64 --n 8 --tokens 256 \
        --micro 64 --steps 3                                     # [--shape 1.7b --only rlfh] [--loops graph]
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from importlib.metadata import version
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TIMES: dict[str, list[float]] = {}
CHECKS: dict[str, object] = {}
QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?", "What is the boiling point of water?",
             "Which planet is known as the red planet?", "Who painted the Mona Lisa?",
             "What is the largest ocean on Earth?", "In which year did World War II end?",
             "What gas do plants absorb from the air?"]


@contextmanager
def timed(name: str):
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    yield
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    TIMES.setdefault(name, []).append(time.perf_counter() - t0)


# ----------------------------------------------------------------------------------------------- prepare

PREP_WHEELS = ["deepspeed==0.19.8", "hjson", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
               "msgpack", "ninja", "py-cpuinfo",
               # --peer: TRL and what it needs beyond a CUDA image with torch, transformers, accelerate, pandas,
               # pyarrow (the lent GPU image has those)
               "trl==1.16.0", "datasets", "dill", "multiprocess"]
#: The transformers this project is tested with goes along (a GPU image's own may be older).
PREP_PINNED_FROM_HERE = ["transformers"]
#: The bundle must fit one transfer to an offline GPU machine.
PREP_MAX_MB = 60


def prepare(out: str, python_version: str) -> int:
    """Tokenizer + config of the embedded model, and wheels a bare CUDA image lacks, under ``out``."""
    from transformers import AutoConfig, AutoTokenizer

    from core.model_loader import resolve_model_path
    src = resolve_model_path("smollm2-135m-instruct")
    mdir = os.path.join(out, "model")
    os.makedirs(mdir, exist_ok=True)
    AutoTokenizer.from_pretrained(src).save_pretrained(mdir)
    AutoConfig.from_pretrained(src).save_pretrained(mdir)
    wdir = os.path.join(out, "wheels")
    os.makedirs(wdir, exist_ok=True)
    # deepspeed ships as an sdist: build a pure-python wheel (its ops JIT-compile on the GPU machine)
    env = dict(os.environ, DS_BUILD_OPS="0")
    # --no-build-isolation: its setup.py imports torch; an isolated build would fetch a CUDA torch (GBs)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", wdir,
                    PREP_WHEELS[0]], check=True, env=env)
    pinned = [f"{name}=={version(name)}" for name in PREP_PINNED_FROM_HERE]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                    python_version, "--platform", "manylinux2014_x86_64", "-d", wdir, *PREP_WHEELS[1:], *pinned],
                   check=True)
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
    print(f"prepared {out}: {size / 2**20:.1f} MiB (carry it; install the wheels with pip --no-index --no-deps)")
    if size > PREP_MAX_MB * 2**20:
        print(f"the bundle is over {PREP_MAX_MB} MB: it will not fit one transfer")
        return 1
    return 0


def random_model(config_dir: str, dtype: str, shape: str = "135m") -> str:
    """The architecture in ``config_dir`` (resized to ``shape``, see :data:`SHAPES`) with random weights, saved
    with its tokenizer to a temp folder."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    out = os.path.join(tempfile.gettempdir(), f"rlfh-gpu-smoke-model-{shape}")
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(config_dir)
    for k, v in SHAPES[shape].items():
        setattr(cfg, k, v)
    # fp32 as TRL's side expects for bf16 mixed precision; the 1.7B shape (our side only) is saved in bf16
    save_dtype = torch.float32 if shape == "135m" else torch.bfloat16
    AutoModelForCausalLM.from_config(cfg, dtype=save_dtype).save_pretrained(out)
    AutoTokenizer.from_pretrained(config_dir).save_pretrained(out)
    return out


# ----------------------------------------------------------------------------------------------- helpers

def make_cfg(args, model_path: str, n_gpus: int):
    from core.config import RLFHConfig
    gpus = max(1, n_gpus)
    return RLFHConfig(
        model_path=model_path, dtype=args.dtype, zero_stage=args.zero_stage, lora_rank=args.lora_rank,
        actor_num_gpus_per_node=gpus, critic_num_gpus_per_node=gpus, ref_num_gpus_per_node=gpus,
        vllm_num_engines=1 if args.colocate else max(1, n_gpus // 2), colocate_all_models=args.colocate,
        vllm_gpu_memory_utilization=args.vllm_mem, vllm_enable_sleep=args.sleep, rollout_backend=args.backend,
        micro_train_batch_size=args.micro, train_batch_size=args.prompts * args.n,
        micro_rollout_batch_size=args.prompts * args.n, generate_max_len=args.tokens, prompt_max_len=256,
        actor_lr=1e-5, critic_lr=1e-5, seed=1, num_cpus_per_actor=0.5, gradient_checkpointing=args.grad_ckpt)


def fake_advantages(batch, samples, seed: int = 0):
    """Seeded random per-sample rewards spread over the tokens: enough to drive a PPO step (the smoke test is
    about the plumbing, not the learning). Returns (advantages [B, R], returns-minus-values [B, R])."""
    import torch
    mask = batch["action_mask"]
    r = torch.randn(mask.shape[0], generator=torch.Generator().manual_seed(seed))
    adv = r[:, None].expand_as(mask).float() * mask
    return adv, adv.clone()


def report(args, extra: dict) -> None:
    rows = []
    for k, v in TIMES.items():
        rows.append({"phase": k, "calls": len(v), "first_s": round(v[0], 3), "mean_s": round(sum(v) / len(v), 3),
                     "last_s": round(v[-1], 3)})
    try:
        from rich.console import Console
        from rich.table import Table
        t = Table(title="gpu smoke timings")
        for c in ("phase", "calls", "first_s", "mean_s", "last_s"):
            t.add_column(c)
        for r in rows:
            t.add_row(*[str(r[c]) for c in ("phase", "calls", "first_s", "mean_s", "last_s")])
        Console().print(t)
    except ImportError:
        for r in rows:
            print(r)
    print(json.dumps({"checks": CHECKS, **extra}, indent=2, default=str))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_smoke.json"), "w") as f:
            json.dump({"args": vars(args), "timings": rows, "checks": CHECKS, **extra}, f, indent=2, default=str)


def environment() -> dict:
    import torch
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": torch.cuda.device_count(),
           "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    for mod in ("deepspeed", "vllm", "ray", "transformers", "peft", "flash_attn"):
        if importlib.util.find_spec(mod) is None:
            env[mod] = None
            continue
        try:
            env[mod] = __import__(mod).__version__
        except Exception as e:  # importable but broken
            env[mod] = f"broken: {e}"
    return env


# ----------------------------------------------------------------------------------------------- modes

def run_in_process(args, cfg) -> dict:
    import torch

    from actors.critic import CriticActor
    from actors.policy import PolicyActor
    from actors.reference import ReferenceActor
    from actors.rollout import make_rollout_engine, resolve_rollout_backend
    from actors.types import make_batch
    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    backend = resolve_rollout_backend(cfg, gpu_available=torch.cuda.is_available())
    with timed("init_policy"):
        policy = PolicyActor(cfg)
        policy.init_model()
    with timed("init_reference"):
        ref = ReferenceActor(cfg)
        ref.init_model()
    with timed("init_critic"):
        critic = CriticActor(cfg)
        critic.init_model()
    with timed(f"init_engine_{backend}"):
        engine = make_rollout_engine(cfg, 0, backend=backend)
    tok = load_tokenizer(cfg.model_path)
    prompts = [render_prompt(tok, q) for q in (QUESTIONS * 8)[:args.prompts]]
    for step in range(args.steps):
        with timed("generate"):
            samples = engine.generate(prompts, args.n, args.tokens, 1.0, 1.0, seed=step)
        n_tok = sum(len(s.response_token_ids) for s in samples)
        CHECKS.setdefault("rollout_tokens_per_s", []).append(round(n_tok / TIMES["generate"][-1], 1))
        batch = make_batch(samples, tok.pad_token_id)
        with timed("policy_logprobs"):
            old = policy.logprobs(batch)
        with timed("ref_logprobs"):
            ref_lp = ref.logprobs(batch)
        with timed("critic_values"):
            values = critic.values(batch)
        adv, ret = fake_advantages(batch, samples, step)
        with timed("policy_train"):
            pm = policy.train_step(dict(batch, old_logprobs=old, advantages=adv))
        with timed("critic_train"):
            cm = critic.train_step(dict(batch, old_values=values, returns=ret + values))
        with timed("weight_sync"):
            if getattr(engine, "model", None) is not None:   # an HF engine in this process: in place, on device
                policy.copy_weights_into(engine.model)
                engine._next_version(policy.weights_version())
            else:
                engine.update_weights(policy.state_dict_for_sync(), policy.weights_version())
        with timed("engine_logprobs"):
            eng = engine.logprobs(batch)
        new = policy.logprobs(batch)
        CHECKS.setdefault("engine_vs_policy_max_abs_logprob_diff", []).append(float((eng - new).abs().max()))
        CHECKS.setdefault("ref_vs_old_policy_max_abs", []).append(float((ref_lp - old).abs().max()))
        CHECKS.setdefault("policy_metrics", []).append(pm)
        CHECKS.setdefault("critic_metrics", []).append(cm)
        CHECKS["sync_bytes"] = policy.sync_meta().get("bytes")
    CHECKS["gpu_mem_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else 0
    policy.shutdown()
    return {"mode": "in-process", "backend": backend}


# ----------------------------------------------------------------------------------------------- peer: vs TRL

#: Architectures of the embedded model's family for --shape (random weights; the timings are the shape's).
SHAPES = {"135m": {}, "1.7b": {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32,
                               "num_key_value_heads": 32, "intermediate_size": 8192}}


#: What --loops accepts: HF_DECODE_LOOP values the peer bench can time ("+compile": HF_DECODE_COMPILE=1).
PEER_LOOPS = ("kv-buffer", "graph", "graph+compile", "generate")


def keyword_rewards(samples, word: str = "the"):
    """1 per response containing ``word`` (the same instant reward TRL's side gets), [B] float."""
    import torch

    from bench.peer import word_pattern
    pat = word_pattern(word)
    return torch.tensor([1.0 if pat.search(s.response_text) else 0.0 for s in samples])


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy bandwidth (bytes read + written per second, GB/s) of 1 GiB, best of 5."""
    import torch
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y.copy_(x)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del x, y
    return 2 * 2**30 / best / 1e9


def decode_bound_tokens_per_s(model, rows: int, context: float, bandwidth_gbs: float) -> float:
    """Tokens/s if a decode step only had to read the weights once and every row's keys and values
    (``context`` positions on average) at ``bandwidth_gbs``: the memory-bandwidth ceiling of this batch."""
    cfg = model.config
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    elem = next(model.parameters()).element_size()
    kv_bytes = rows * context * cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * elem
    return rows / ((weight_bytes + kv_bytes) / (bandwidth_gbs * 1e9))


def run_peer(args, model_path: str) -> dict:
    """This trainer's GRPO step (colocated: the engine samples from the policy's own module) against TRL
    GRPOTrainer's, same model, prompts, batch and GPU. Per decode loop: generate, old log-probs, policy update;
    TRL: its whole step (generation included). Both: no KL, one update per rollout, instant keyword reward."""
    import torch

    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    cfg = make_cfg(args, model_path, 1).model_copy(update={"advantage_estimator": "grpo", "kl_coef": 0.0})
    tok = load_tokenizer(model_path)
    prompts = [render_prompt(tok, q) for q in (QUESTIONS * (args.prompts // len(QUESTIONS) + 1))[:args.prompts]]
    bandwidth = copy_bandwidth_gbs() if torch.cuda.is_available() else 0.0
    CHECKS["copy_bandwidth_GBps"] = round(bandwidth, 1)
    out: dict = {"mode": "peer", "loops": {}, "trl": {}}
    if args.only in ("both", "trl"):   # first: what it leaves on the GPU is freed before our side runs
        out["trl"] = _peer_trl(args, model_path, prompts)
    if args.only in ("both", "rlfh"):
        _peer_rlfh(args, cfg, tok, prompts, bandwidth, out["loops"])
    return out


def _peer_trl(args, model_path: str, prompts: list[str]) -> dict:
    """TRL GRPOTrainer's step times and peak memory (``{"error"}`` when TRL fails); the GPU emptied after."""
    import torch
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    try:
        times = run_trl_gpu(args, model_path, prompts)
        trl = {"step_s": times, "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
               if torch.cuda.is_available() else 0}
    except Exception as e:  # noqa: BLE001 - still time our side, and say why TRL has no row
        trl = {"error": f"{type(e).__name__}: {e}"[:400]}
        print(f"TRL failed: {trl['error']}", flush=True)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return trl


def _peer_rlfh(args, cfg, tok, prompts: list[str], bandwidth: float, loops: dict) -> None:
    """This trainer's side: one colocated actor, each decode loop of ``args.loops`` timed into ``loops``
    (:func:`_peer_loop`), then the greedy agreement checks of the graph loop (:func:`_peer_greedy_checks`)."""
    import torch

    from actors.colocated import ColocatedActor
    with timed("init_colocated"):
        actor = ColocatedActor(cfg)
        actor.init_model()
    engine = actor.roles["rollout"]
    for loop in args.loops.split(","):
        loops[loop] = _peer_loop(args, actor, engine, tok, prompts, loop, bandwidth)
    # the graph replay is the eager fixed-shape step, recorded: greedy tokens must agree exactly
    if "graph" in args.loops.split(",") and torch.cuda.is_available():
        _peer_greedy_checks(args, engine, prompts)
    actor.shutdown()
    del actor, engine
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _peer_loop(args, actor, engine, tok, prompts: list[str], loop: str, bandwidth: float) -> dict:
    """``args.steps`` GRPO steps with the decode loop ``loop`` ("graph+compile": HF_DECODE_LOOP=graph with
    HF_DECODE_COMPILE=1): generate, keyword reward, advantages, policy update; then the sampling loop alone.
    Returns the loop's times, tokens/s (and the memory-bandwidth bound), peak memory."""
    import torch

    from actors.types import make_batch
    from core.core_algos import compute_advantages
    rows = args.prompts * args.n
    engine.decode_loop = loop.split("+")[0]
    engine.cfg = engine.cfg.model_copy(update={"hf_decode_compile": loop.endswith("+compile")})
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    res = {"generate_s": [], "train_s": [], "step_s": [], "tokens_per_s": []}
    for step in range(args.steps):
        t0 = time.perf_counter()
        with timed(f"{loop}/generate"):
            samples = engine.generate(prompts, args.n, args.tokens, 1.0, 1.0, seed=step)
        res["generate_s"].append(TIMES[f"{loop}/generate"][-1])
        n_tok = sum(len(s.response_token_ids) for s in samples)
        res["tokens_per_s"].append(n_tok / res["generate_s"][-1])
        batch = make_batch(samples, tok.pad_token_id)
        rewards = torch.zeros(batch["action_mask"].shape)
        last = batch["action_mask"].long().cumsum(-1).argmax(-1)
        rewards[torch.arange(len(samples)), last] = keyword_rewards(samples, args.word)
        adv, _ = compute_advantages("grpo", rewards, batch["action_mask"], n_samples_per_prompt=args.n)
        with timed(f"{loop}/policy_train"):   # no old log-prob forward: one update per rollout, no KL,
            actor.train_step(dict(batch, advantages=adv))   # its own detached log-probs are the old ones
        res["train_s"].append(TIMES[f"{loop}/policy_train"][-1])
        engine.follow_weights(actor.weights_version())   # colocated: the engine IS the policy module
        res["step_s"].append(time.perf_counter() - t0)
        mean_ctx = (sum(len(s.prompt_token_ids) for s in samples) + n_tok / 2) / len(samples)
        res["bound_tokens_per_s"] = decode_bound_tokens_per_s(engine.model, rows, mean_ctx, bandwidth) \
            if bandwidth else None
        print(f"rlfh [{loop}] step {step + 1}: {res['step_s'][-1]:.2f}s (generate {res['generate_s'][-1]:.2f}s"
              f" at {res['tokens_per_s'][-1]:.0f} tok/s, train {res['train_s'][-1]:.2f}s)", flush=True)
    # the sampling loop alone (no sample building: detokenising and offsets of every response run on the CPU)
    ids = engine.encode_prompts(prompts)
    with timed(f"{loop}/decode_only"):
        engine._generate_ids(ids, args.tokens, 1.0, 1.0, 0, n=args.n)
    res["decode_only_s"] = TIMES[f"{loop}/decode_only"][-1]
    res["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else 0
    if loop == "graph":
        from actors.decode import LAST_CAPTURE_ERROR
        res["capture_error"] = LAST_CAPTURE_ERROR["error"]
    return res


def _peer_greedy_checks(args, engine, prompts: list[str]) -> None:
    """Greedy tokens must agree: graph replay vs the eager fixed-shape step, the compiled graph step vs the
    graph step (all rows, where a "+compile" loop ran), the kv-buffer loop vs the graph step (into CHECKS)."""
    few = prompts[:8]
    greedy = {}
    for name, graph in (("graph-eager", False), ("graph", True)):
        engine.decode_loop = "graph"
        greedy[name] = [s.response_token_ids for s in _greedy_with(engine, few, graph, args.tokens)]
    CHECKS["graph_replay_equals_eager_greedy"] = greedy["graph"] == greedy["graph-eager"]
    if any(loop.endswith("+compile") for loop in args.loops.split(",")):
        # the benchmark's own batch shape (all rows), so that the compiled step is not compiled again
        engine.decode_loop, rows_greedy = "graph", {}
        for on in (False, True):
            engine.cfg = engine.cfg.model_copy(update={"hf_decode_compile": on})
            rows_greedy[on] = [s.response_token_ids for s in engine.generate(prompts, args.n, args.tokens,
                                                                             0.0, 1.0)]
        CHECKS["compiled_graph_equals_graph_greedy_rows"] = sum(
            a == b for a, b in zip(rows_greedy[True], rows_greedy[False])) / len(rows_greedy[True])
    engine.decode_loop = "kv-buffer"
    CHECKS["kv_buffer_equals_graph_greedy_rows"] = sum(
        a == b for a, b in zip(greedy["graph"], [s.response_token_ids for s in engine.generate(
            few, 1, args.tokens, 0.0, 1.0)])) / len(few)


def _greedy_with(engine, prompts, cuda_graph: bool, tokens: int):
    """Greedy samples of the fixed-shape loop, replayed from a CUDA graph or run eagerly."""
    from actors import decode
    real = decode.sample

    def forced(*a, **kw):
        kw["cuda_graph"] = cuda_graph
        return real(*a, **kw)
    with mock.patch.object(decode, "sample", forced):
        return engine.generate(prompts, 1, tokens, 0.0, 1.0)


def run_trl_gpu(args, model_path: str, prompts: list[str]) -> list[float]:
    """Seconds per optimizer step of TRL GRPOTrainer on this GPU (generation included), bf16, no KL."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from bench.peer import trl_step_timer, word_reward
    reward = word_reward(args.word)
    times: list[float] = []

    import torch
    data = Dataset.from_list([{"prompt": p} for p in prompts] * max(1, args.steps))
    with tempfile.TemporaryDirectory(prefix="rlfh-gpu-peer-") as tmp:
        rows = len(prompts) * args.n
        micro = args.micro if rows % args.micro == 0 else rows
        # one optimizer step = generation of all rows + rows / micro accumulated micro batches, as on our side
        cfg = GRPOConfig(output_dir=tmp, per_device_train_batch_size=micro,
                         gradient_accumulation_steps=rows // micro, num_generations=args.n,
                         max_completion_length=args.tokens,
                         beta=0.0, learning_rate=1e-6, max_steps=args.steps, temperature=1.0,
                         use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available(), report_to=[],
                         save_strategy="no", logging_steps=1, seed=1, num_iterations=1, shuffle_dataset=False,
                         gradient_checkpointing=args.grad_ckpt)
        trainer = GRPOTrainer(model=model_path, reward_funcs=reward, args=cfg, train_dataset=data,
                              callbacks=[trl_step_timer(times)])
        trainer.train()
    return times


def peer_report(args, out: dict) -> None:
    """The phase table of --peer: per decode loop and TRL, steps 2+ (the first compiles / warms up)."""
    def mean(xs):
        xs = xs[1:] or xs
        return sum(xs) / len(xs) if xs else float("nan")
    lines = ["| run | generate s | of it: sampling loop s | rollout tok/s | bandwidth bound tok/s | policy train s "
             "| step s | peak GiB |", "|---|---|---|---|---|---|---|---|"]
    for loop, r in out["loops"].items():
        bound = r.get("bound_tokens_per_s")
        lines.append(f"| rlfh, HF_DECODE_LOOP={loop} | {mean(r['generate_s']):.2f} | {r.get('decode_only_s', 0):.2f} | "
                     f"{mean(r['tokens_per_s']):.0f} | {f'{bound:.0f}' if bound else '-'} | {mean(r['train_s']):.2f} | "
                     f"{mean(r['step_s']):.2f} | {r['peak_gib']} |")
    trl = out.get("trl") or {}
    if trl.get("error"):
        lines.append(f"| TRL GRPOTrainer | failed: {trl['error'][:120]} | | | | | | |")
    if trl.get("step_s"):
        lines.append(f"| TRL GRPOTrainer | | | | | | {mean(trl['step_s']):.2f} (all: "
                     f"{', '.join(f'{x:.1f}' for x in trl['step_s'])}) | {trl['peak_gib']} |")
        for loop, r in out["loops"].items():
            lines.append(f"\nrlfh ({loop}) / TRL step time: {mean(r['step_s']) / mean(trl['step_s']):.2f}x "
                         "(target <= 1, moonshot 0.5)")
    print(f"\n{args.prompts} prompts x {args.n} samples x {args.tokens} tokens, {args.dtype}, shape {args.shape}, "
          f"steps 2+ of {args.steps}:\n" + "\n".join(lines))
    out["table_md"] = "\n".join(lines)


def run_ray(args, cfg) -> dict:
    import ray
    import torch

    from actors.group import create_groups
    from actors.rollout import generate_on_engines
    from actors.types import make_batch
    from actors.weight_sync import last_sync_stats, sync_weights
    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address=os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False)
    try:
        with timed("create_groups"):
            g = create_groups(cfg)
        tok = load_tokenizer(cfg.model_path)
        prompts = [render_prompt(tok, q) for q in (QUESTIONS * 8)[:args.prompts]]
        for step in range(args.steps):
            with timed("generate"):
                samples = generate_on_engines(g.rollout, prompts, args.n, args.tokens, 1.0, 1.0, seed=step,
                                              timeout=cfg.actor_timeout_s)
            batch = make_batch(samples, tok.pad_token_id)
            with timed("policy_logprobs"):
                old = g.policy.dispatch_cat("logprobs", batch)
            if g.reference is not None:
                with timed("ref_logprobs"):
                    g.reference.dispatch_cat("logprobs", batch)
            adv, ret = fake_advantages(batch, samples, step)
            values = None
            if g.critic is not None:
                with timed("critic_values"):
                    values = g.critic.dispatch_cat("values", batch)
            with timed("policy_train"):
                pm = g.policy.dispatch("train_step", dict(batch, old_logprobs=old, advantages=adv))
            if g.critic is not None:
                with timed("critic_train"):
                    g.critic.dispatch("train_step", dict(batch, old_values=values, returns=ret + values))
            with timed("weight_sync"):
                sync_weights(g.policy, g.rollout)
            CHECKS.setdefault("sync", []).append(last_sync_stats(g.policy))
            CHECKS.setdefault("policy_metrics", []).append(pm[0])
            if hasattr(g.rollout[0], "logprobs"):
                eng = ray.get(g.rollout[0].logprobs.remote(batch))
                new = g.policy.dispatch_cat("logprobs", batch)
                CHECKS.setdefault("engine_vs_policy_max_abs_logprob_diff", []).append(float((eng - new).abs().max()))
        backend = g.rollout_backend
        g.shutdown()
    finally:
        ray.shutdown()
    return {"mode": "ray", "backend": backend, "torch_cuda": torch.cuda.is_available()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare", metavar="DIR", help="write tokenizer/config + wheels to DIR (CPU machine) and exit")
    ap.add_argument("--python-version", default="3.12", help="target Python of --prepare's wheels (default 3.12)")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="HF folder or the embedded model's name")
    ap.add_argument("--random-model", metavar="DIR", help="random weights with the config/tokenizer in DIR")
    ap.add_argument("--ray", action="store_true", help="use Ray groups (create_groups, sync_weights)")
    ap.add_argument("--backend", default="auto", choices=["auto", "hf", "vllm"], help="rollout backend")
    ap.add_argument("--steps", type=int, default=2, help="PPO steps")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--tokens", type=int, default=64, help="max new tokens")
    ap.add_argument("--micro", type=int, default=8, help="micro train batch size")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "fp16"])
    ap.add_argument("--zero-stage", type=int, default=0, choices=[0, 1, 2, 3])
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing")
    ap.add_argument("--colocate", action=argparse.BooleanOptionalAction, default=None,
                    help="COLOCATE_ALL_MODELS (default: on when there is one GPU)")
    ap.add_argument("--sleep", action="store_true", help="VLLM_ENABLE_SLEEP")
    ap.add_argument("--vllm-mem", type=float, default=0.3, help="VLLM_GPU_MEMORY_UTILIZATION")
    ap.add_argument("--allow-cpu", action="store_true", help="dry-run the script's logic on CPU (no GPU paths)")
    ap.add_argument("--peer", action="store_true",
                    help="benchmark: this trainer's GRPO step (colocated, per --loops) vs TRL GRPOTrainer's on the "
                         "same model, prompts, batch and GPU; prints the phase table, the ratio, peak memory and "
                         "the rollout's tokens/s next to the card's memory-bandwidth bound (needs trl + datasets: "
                         "--prepare carries their wheels)")
    ap.add_argument("--loops", default="kv-buffer,graph",
                    help="--peer: HF_DECODE_LOOP values to time, comma-separated (default kv-buffer,graph; "
                         "graph+compile: graph with HF_DECODE_COMPILE=1)")
    ap.add_argument("--only", choices=["both", "rlfh", "trl"], default="both", help="--peer: run one side only")
    ap.add_argument("--word", default="the", help="--peer: reward 1 for a response containing this word")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="135m",
                    help="--random-model: the embedded model's architecture (135m) or a 1.7B one of its family")
    args = ap.parse_args(argv)
    if args.prepare:
        return prepare(args.prepare, args.python_version)
    bad = [loop for loop in args.loops.split(",") if loop not in PEER_LOOPS]
    if bad:
        ap.error(f"--loops: unknown loop(s) {bad}; choose from {', '.join(PEER_LOOPS)} (comma-separated)")
    import torch
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    env = environment()
    print("environment:", json.dumps(env))
    n_gpus = torch.cuda.device_count()
    if n_gpus == 0 and not args.allow_cpu:
        print("no CUDA GPU visible: this is a GPU smoke test (the CPU path is covered by tests/test_actors_ray.py;"
              " --allow-cpu dry-runs this script on CPU)")
        return 2
    if n_gpus == 0:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if args.colocate is None:
        args.colocate = n_gpus == 1
    model = random_model(args.random_model, args.dtype, args.shape) if args.random_model else args.model
    cfg = make_cfg(args, model, n_gpus)
    if n_gpus == 0:  # CPU dry run: no GPU placement
        cfg = cfg.model_copy(update={"actor_num_gpus_per_node": 0, "critic_num_gpus_per_node": 0,
                                     "ref_num_gpus_per_node": 0, "num_cpus_per_actor": 0.25})
    t0 = time.time()
    if args.peer:
        extra = run_peer(args, model)
        peer_report(args, extra)
    else:
        extra = run_ray(args, cfg) if args.ray else run_in_process(args, cfg)
    extra.update({"environment": env, "total_s": round(time.time() - t0, 1)})
    report(args, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
