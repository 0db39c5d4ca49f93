"""Where a run's rewards come from: a reward function the caller passed, the reward service at REWARD_URL, or
one deployed here on the run's Ray (Ray Serve), with VERIFIER_BACKEND=self judged by the policy's own rollout
engines.

:class:`RewardSource` holds that choice for the run: ``reward_fn`` is what the experience maker calls, and
after an actor-group restart :meth:`RewardSource.on_new_groups` points a self-judging verifier at the new
engines.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from cluster.experience import SelfJudge, ServiceReward
from core.config import RLFHConfig
from core.ray_bootstrap import free_port, port_is_free

log = logging.getLogger(__name__)

#: Seconds the trainer waits for the reward service to answer its readiness check at start-up.
READY_TIMEOUT_S = 120.0


class RewardSource:
    """The run's reward function (see :class:`cluster.experience.RewardFn`) and the service behind it.

    Args:
        cfg: the run's settings (REWARD_URL, VERIFIER_BACKEND, SERVE_HOST / SERVE_PORT).
        reward_fn: a reward function of the caller's (tests, demos); then nothing is connected or deployed.
    """

    def __init__(self, cfg: RLFHConfig, reward_fn: Optional[Callable] = None):
        self.cfg = cfg
        self.reward_fn = reward_fn
        self.service: Optional[ServiceReward] = None   # the HTTP client, when rewards come from the service
        self.self_judge: Optional[SelfJudge] = None     # VERIFIER_BACKEND=self: the verifier replicas' engines
        self.deployed = False                           # the service was deployed here (shut down at close)

    @property
    def judge_needs_engines(self) -> bool:
        """VERIFIER_BACKEND=self on a service deployed here: the verifier replicas judge with the rollout
        engines, so those must be up before the service is."""
        return self.reward_fn is None and not self.cfg.reward_url and self.cfg.verifier_backend == "self"

    def connect(self, rollout_engines=None) -> None:
        """The reward function: REWARD_URL's service, or one deployed on this Ray (``rollout_engines``: the
        judges of VERIFIER_BACKEND=self). Nothing to do when the caller passed a ``reward_fn``."""
        if self.reward_fn is not None:
            return
        factory = None
        if rollout_engines is not None:
            self.self_judge = factory = SelfJudge(rollout_engines)
        url = self.cfg.reward_url or self._deploy(factory)
        self.service = ServiceReward(url, self.cfg)
        self.service.client.wait_ready(timeout_s=READY_TIMEOUT_S)
        self.reward_fn = self.service
        log.info("rewards from the reward service at %s", url)

    def on_new_groups(self, groups) -> None:
        """After an actor-group restart: the same app, its verifier replicas handed the new rollout engines
        (nothing to do unless they judge with the engines)."""
        if self.self_judge is None:
            return
        # Ray Serve and the service's app (FastAPI) load only where a service is deployed here: a run with
        # REWARD_URL, or with its own reward function, never needs them.
        from ray import serve

        from reward_service.app import APP_NAME, build_app
        self.self_judge = SelfJudge(groups.rollout)
        serve.run(build_app(self.cfg, self.self_judge), name=APP_NAME, route_prefix="/", blocking=False)

    def _deploy(self, verifier_factory=None) -> str:
        from reward_service.app import deploy   # Ray Serve: see on_new_groups
        cfg = self.cfg
        port = cfg.serve_port
        if not port_is_free(port, cfg.serve_host if cfg.serve_host not in ("0.0.0.0", "::") else "127.0.0.1"):
            new = free_port()
            log.warning("SERVE_PORT %d is taken on this machine; the reward service uses %d instead", port, new)
            port = new
        url = deploy(cfg, host=cfg.serve_host, port=port, verifier_factory=verifier_factory)
        self.deployed = True
        return url

    def close_client(self) -> None:
        if self.service is not None:
            self.service.close()

    def shutdown_service(self) -> None:
        """Take down the service deployed here (after the actor groups: its verifiers may hold their engines)."""
        if self.deployed:
            from reward_service.app import shutdown   # Ray Serve: see on_new_groups
            shutdown()
            self.deployed = False
