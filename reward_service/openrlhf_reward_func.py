"""OpenRLHF's in-process reward function, backed by the RLFH reward service.

OpenRLHF (0.11) loads a Python file given as ``--reward.remote_url`` and calls its
``reward_func(queries, prompts, labels)`` once per rollout (in a worker thread)::

    REWARD_URL=http://127.0.0.1:8000 python -m openrlhf.cli.train_ppo_ray ... \\
        --reward.remote_url $(python -c 'import reward_service.openrlhf_reward_func as m; print(m.__file__)') \\
        --data.input_key question --data.label_key label

(the whole command: docs/INTEGRATIONS.md). This file and :mod:`reward_service.openrlhf_adapter` (the service's
side of ``/get_reward``) are all the OpenRLHF glue. OpenRLHF loads this file outside ``sys.modules``, where a
``@dataclass`` fails to build: keep it to functions.

Each call goes to the service's ``/get_reward`` (the same parsing as OpenRLHF's HTTP mode: chat template and
EOS in the query are handled), through :class:`reward_service.client.RewardClient`: every request has a
timeout (``REWARD_TIMEOUT_S``), failures are retried ``REWARD_MAX_RETRIES`` times with back-off and counted,
and a 4xx (bad input) raises at once with the server's message. ``REWARD_API_TOKEN`` is sent as a bearer token.

Why use this rather than ``--reward.remote_url http://host:port/get_reward``: OpenRLHF's HTTP client retries
every error (a 422 included) five times without a back-off cap or auth header; this one sends the token,
does not retry bad input, and batches.

Returns ``{"rewards": (B,) float tensor, "scores": (B,) float tensor in [0, 1] (share of correct statements),
"extra_logs": {name: (B,) tensor}}``, as OpenRLHF expects. rlfh must be importable in the OpenRLHF
environment (``pip install rlfh`` or this repository with ``pip install -e .``).
"""
from __future__ import annotations

import json
import threading
from typing import Any, Mapping, Optional, Sequence

from reward_service.client import RewardClient, client_from_env

_client: Optional[RewardClient] = None
_lock = threading.Lock()


def get_client() -> RewardClient:
    """The process's client (built once from the environment, shared by OpenRLHF's worker threads)."""
    global _client
    with _lock:
        if _client is None:
            _client = client_from_env()
        return _client


def label_text(label: Any) -> Optional[str]:
    """A dataset label as ``/get_reward`` takes it: None, a gold-answer string, or a JSON object string."""
    if label is None or isinstance(label, str):
        return label
    if isinstance(label, Mapping):
        return json.dumps(dict(label))
    return str(label)


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Optional[Sequence[Any]] = None) -> dict:
    """OpenRLHF's reward function: ``queries[i]`` = prompt + response (special tokens kept), ``prompts[i]`` the
    templated prompt, ``labels[i]`` a gold answer or a JSON object (``knowledge``, ``answer``, ``question``).

    Returns ``{"rewards": (B,), "scores": (B,), "extra_logs": {k: (B,)}}`` float32 tensors.
    """
    import torch

    if len(queries) == 0:
        return {"rewards": torch.zeros(0), "scores": torch.zeros(0), "extra_logs": {}}
    client = get_client()
    labs = None if labels is None else [label_text(x) for x in labels]
    size = client.batch_size or len(queries)
    rewards: list[float] = []
    scores: list[float] = []
    extra: dict[str, list[float]] = {}
    for start in range(0, len(queries), size):
        end = start + size
        out = client.get_reward(list(queries[start:end]), None if prompts is None else list(prompts[start:end]),
                                None if labs is None else labs[start:end])
        got = out.get("rewards") if isinstance(out, dict) else None
        if not isinstance(got, list) or len(got) != len(queries[start:end]):
            raise RuntimeError(f"/get_reward answered {len(got) if isinstance(got, list) else 'no'} rewards for "
                               f"{len(queries[start:end])} queries; is REWARD_URL an rlfh reward service?")
        rewards += [float(x) for x in got]
        scores += [float(x) for x in out.get("scores", got)]
        for k, v in (out.get("extra_logs") or {}).items():
            extra.setdefault(k, []).extend(float(x) for x in v)
    t = lambda xs: torch.tensor(xs, dtype=torch.float32)  # noqa: E731
    return {"rewards": t(rewards), "scores": t(scores), "extra_logs": {k: t(v) for k, v in extra.items()}}
