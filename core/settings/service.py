"""Service settings: the Ray Serve deployments, the verification cache and the trainer's reward client; and
:class:`ServiceSettings`, the section the verifier and reward services read."""
from __future__ import annotations

from typing import Any

from pydantic import model_validator

from core.reward_settings import RewardSettings
from core.settings.base import NODE_RESOURCE_PATTERN, Settings, setting
from core.settings.model import ModelPathSettings
from core.settings.reward import ServiceRewardSettings
from core.settings.verifier import VerifierSettings

#: The reward service's settings (sent as per-request overrides by the trainer): those RewardSettings defines.
REWARD_FIELDS = tuple(RewardSettings.model_fields)


class ServeSettings(Settings):
    """Where the services run and how they are reached: Serve, replicas, the cache, the reward client."""

    ROLE = "service"

    reward_url: str = setting("", "Use an already running reward service at this URL instead of deploying one.",
                              env="REWARD_URL")
    reward_api_token: str = setting("", "Bearer token the reward service requires (empty: no auth; secret).",
                                    env="REWARD_API_TOKEN")
    redis_url: str = setting("", "Redis URL for the verification cache (empty: in-process LRU).", env="REDIS_URL")
    cache_ttl_s: int = setting(7 * 24 * 3600, "Redis cache entry lifetime, seconds.", env="CACHE_TTL_S", ge=1)
    cache_size: int = setting(50_000, "Entries in the in-process LRU cache.", env="CACHE_SIZE", ge=1)
    serve_host: str = setting("127.0.0.1", "Host the Serve HTTP proxy binds.", env="SERVE_HOST")
    serve_port: int = setting(8000, "Port the Serve HTTP proxy binds.", env="SERVE_PORT", ge=1, le=65535)
    serve_access_log: bool = setting(
        False, "Log every request the Serve replicas handle (the Ray dashboard and /v1/stats count them either "
        "way).", env="SERVE_ACCESS_LOG",
        doc="One line per call; off keeps training output readable.")
    verifier_replicas: int = setting(1, "Verifier deployment replicas (min replicas when autoscaling).",
                                     env="VERIFIER_REPLICAS", ge=1)
    reward_replicas: int = setting(1, "Reward deployment replicas (min replicas when autoscaling).",
                                   env="REWARD_REPLICAS", ge=1)
    max_replicas: int = setting(0, "Autoscaling upper bound per deployment (0: autoscaling off).",
                                env="SERVE_MAX_REPLICAS", ge=0)
    verifier_num_cpus: float = setting(0.25, "CPUs each verifier replica reserves.", env="VERIFIER_NUM_CPUS", gt=0)
    reward_num_cpus: float = setting(0.25, "CPUs each reward replica reserves.", env="REWARD_NUM_CPUS", gt=0)
    service_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the verifier and reward replicas (see "
        "ACTOR_NODE_RESOURCE). Empty: any node.", env="SERVICE_NODE_RESOURCE", pattern=NODE_RESOURCE_PATTERN)
    max_batch_items: int = setting(512, "Largest /v1/rewards batch accepted (422 beyond).", env="MAX_BATCH_ITEMS",
                                   ge=1)
    reward_timeout_s: float = setting(120.0, "Trainer-side timeout of one reward HTTP call, seconds.",
                                      env="REWARD_TIMEOUT_S", gt=0)
    reward_max_retries: int = setting(
        10, "Trainer-side retries of a failed reward call, with a doubling back-off, before the batch is skipped.",
        env="REWARD_MAX_RETRIES", ge=0, le=20,
        doc="A skipped batch's rollouts are thrown away. The default outlasts Serve replacing a lost replica or HTTP "
        "proxy (docs/DEPLOY.md, 'When a node dies').")


class ServiceSettings(ModelPathSettings, ServiceRewardSettings, VerifierSettings, ServeSettings):
    """What the verifier and reward services read, and nothing else: the model path (the reward service's
    tokenizer), the reward settings, the verifier, the Serve deployments, the cache, the reward client. A service
    replica builds this section only, so a training setting (ABSTAIN_SAMPLES, ACTOR_LR...) can neither break nor
    change it. ``RLFHConfig`` extends it."""

    @model_validator(mode="after")
    def _service_checks(self):
        if self.verifier_backend == "llm" and not self.model_url:
            raise ValueError("VERIFIER_BACKEND=llm needs MODEL_URL (an OpenAI-compatible endpoint)")
        return self

    def reward_settings(self) -> dict[str, Any]:
        """The reward-shaping fields, as sent to the reward service."""
        return {k: getattr(self, k) for k in REWARD_FIELDS}
