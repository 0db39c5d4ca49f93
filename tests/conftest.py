"""Shared fixtures: a real Redis (from scripts/run_tests.sh or REDIS_URL) and the embedded assets."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# ------------------------------------------------------------------------------------------------ durations
# `--durations-file PATH` (scripts/run_tests.sh passes .pytest-durations.json): every test's setup + call +
# teardown seconds, slowest first, so the next maintainer sees where the suite's time goes without a rerun.

def pytest_addoption(parser):
    parser.addoption("--durations-file", default=None, metavar="PATH",
                     help="write each test's seconds (setup + call + teardown) to PATH as JSON, slowest first")


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    _stop_serve()                   # a session cut short (-x, Ctrl-C) after a shared-service test
    path = session.config.getoption("--durations-file", None)
    # under pytest-xdist every worker finishes a session too; the controller sees all reports and writes the file
    if not path or not _durations or hasattr(session.config, "workerinput"):
        return
    import json
    rows = sorted(_durations.items(), key=lambda kv: -kv[1])
    doc = {"exitstatus": int(exitstatus), "tests": len(rows), "total_s": round(sum(_durations.values()), 2),
           "durations_s": {k: round(v, 3) for k, v in rows}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


#: The wall-clock bound of tests that check a wait is bounded (retries, timeouts, back-off): generous, so that it
#: only catches a hang. What was waited for is checked by counts and outcomes, never by a tight time on a runner
#: other jobs may be loading; timings belong in `rlfh bench`.
HANG_S = 60.0


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """A test that pins torch to one thread (for bit-equal comparisons) must not leave every later module of the
    session on one thread: restore the count it found."""
    import torch
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


# The one free_port (core/ports.py says why it draws from 20000-32767 and not from the kernel's ephemeral range);
# tests import it from here as before.
from core.ports import free_port  # noqa: E402,F401


@pytest.fixture(scope="session")
def redis_url() -> str:
    """REDIS_URL of a real server. Fails (not skips) when there is none: tests must run against real Redis."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.fail("REDIS_URL is not set: run the tests with `make test` (it starts redis-server)")
    return url


class RedisProcess:
    """A private redis-server the test may stop and restart (for outage tests)."""

    def __init__(self):
        if not shutil.which("redis-server"):
            pytest.fail("redis-server is not installed: run the tests with `make test` (it installs it)")
        self.port = free_port()
        self.dir = tempfile.mkdtemp()
        self.proc = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None


def _private_redis():
    r = RedisProcess().start()
    yield r
    r.stop()
    shutil.rmtree(r.dir, ignore_errors=True)


@pytest.fixture
def private_redis():
    """A redis-server of this test's own (tests that stop, flush or count it)."""
    yield from _private_redis()


@pytest.fixture(scope="module")
def private_redis_module():
    """A redis-server of this module's own, shared by its tests."""
    yield from _private_redis()


# ------------------------------------------------------------------------------------------------ shared Ray + Serve
# The modules that test the reward service over HTTP (tests/test_metrics_scrape.py, test_integrations_*.py,
# test_schemathesis.py, test_service_hostile.py, test_service_rewards.py) each deploy the app with settings of their
# own, but none needs a Ray or a Serve controller and HTTP proxy of its own: they share one embedded Ray (with a
# Prometheus export port) and one Serve proxy (``serve_ray``), and each module deploys its app on them and deletes it
# when it is done (``SharedServe.app``). That saves a Ray start, a Serve start and their shutdowns per module.
# These modules run one after another, test_metrics_scrape.py first (its scrape then counts only its own requests):
# pytest_collection_modifyitems orders them, and under xdist they are one unit of work for one worker
# (pytest_xdist_make_scheduler); the Ray is shut down as soon as the next test belongs to a module that does not
# use it (so no other module ever finds this Ray running) and at the end of the session. A test that kills, stalls
# for good or reconfigures Ray or Serve themselves (tests/test_faults.py) starts its own.

SERVE_FIXTURE = "serve_ray"
SERVE_FIRST = "test_metrics_scrape.py"


class SharedServe:
    """An embedded Ray (2 logical CPUs, no dashboard, metrics on a free port) and Serve's HTTP proxy on a free
    loopback port. Its processes report their metrics every second instead of Ray's 10 s, so the scrape test finds
    them after a second or two rather than after up to 10 s."""

    def __init__(self):
        import ray
        from ray import serve
        self.port, self.metrics_port = free_port(), free_port()
        ray.init(address="local", num_cpus=2, include_dashboard=False, _metrics_export_port=self.metrics_port,
                 _system_config={"metrics_report_interval_ms": 1000})
        serve.start(http_options={"host": "127.0.0.1", "port": self.port})

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @contextlib.contextmanager
    def app(self, cfg, **deploy_kw):
        """The reward service app for ``cfg`` on this Serve (``deploy_kw``: reward_service.app.deploy's); yields its
        URL and deletes the app on exit."""
        from ray import serve

        from reward_service.app import APP_NAME, deploy
        try:
            yield deploy(cfg, "127.0.0.1", self.port, **deploy_kw)
        finally:
            serve.delete(APP_NAME)

    def stop(self) -> None:
        import ray
        from ray import serve
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


_serve: dict = {"value": None, "modules": frozenset()}


@pytest.fixture(scope="module")
def serve_ray() -> SharedServe:
    """The Ray + Serve the service modules share (started on first use)."""
    if _serve["value"] is None:
        _serve["value"] = SharedServe()
    return _serve["value"]


def _stop_serve() -> None:
    _stop_shared_service()
    shared = _serve["value"]
    if shared is not None:
        _serve["value"] = None
        shared.stop()


# The integration modules (tests/test_integrations_*.py) also share one app: the same settings
# (tests/integration_service.py's defaults), and none restarts, kills or reconfigures it. It is deployed on first
# use and deleted as soon as the next test belongs to a module that does not use it. A test that needs its own
# settings or breaks the service deploys its own (as tests/test_service_*.py do).

SHARED_SERVICE_FIXTURE = "shared_reward_service"
_shared_service: dict = {"cm": None, "value": None, "modules": frozenset()}


def _modules_using(items, fixture: str) -> list[str]:
    return list(dict.fromkeys(str(it.path) for it in items if fixture in getattr(it, "fixturenames", ())))


#: Seconds per module of a full run (2-core AMD EPYC, 2 xdist workers, .ci/run at 684e606), for the modules over
#: 20 s and those sharing the Serve. Under xdist (``--dist loadfile``) each module goes to whichever worker is free
#: next, in collection order; run the longest first (LPT scheduling) and the two workers finish close together
#: instead of one waiting on a long module started last. The shared-Serve modules weigh their sum (one unit of
#: work). A local .pytest-durations.json (every run writes one) replaces these figures when present.
MODULE_SECONDS = {
    "test_faults.py": 208, "test_train_sh.py": 163, "test_multinode.py": 107, "test_speed.py": 107,
    "test_learning.py": 88, "test_decode.py": 85, "test_metrics_scrape.py": 78, "test_layouts.py": 77,
    "test_eval_cli.py": 63, "test_e2e_train.py": 63, "test_actors_ray.py": 59, "test_judge.py": 51,
    "test_baselines.py": 51, "test_select.py": 46, "test_schemathesis.py": 40, "test_deploy.py": 34,
    "test_verifier_cli.py": 31, "test_abstain_threshold.py": 29, "test_grounding_gate.py": 29,
    "test_actors_inprocess.py": 25, "test_service_hostile.py": 23, "test_cpu_blas.py": 21,
    "test_integrations_openrlhf.py": 16, "test_show.py": 14, "test_service_rewards.py": 14,
    "test_integrations_trl.py": 4, "test_integrations_verl.py": 2}


def _module_seconds(config) -> dict[str, float]:
    path = Path(str(config.rootpath)) / ".pytest-durations.json"
    try:
        measured: dict[str, float] = {}
        for nodeid, sec in json.loads(path.read_text())["durations_s"].items():
            name = nodeid.split("::")[0].rsplit("/", 1)[-1]
            measured[name] = measured.get(name, 0.0) + float(sec)
        return {**MODULE_SECONDS, **measured}   # a partial run measured only some modules
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return dict(MODULE_SECONDS)


@functools.lru_cache(maxsize=None)    # the scheduler asks once per test; each module is parsed once
def _uses_shared_serve(module_path: str) -> bool:
    """Whether a test module asks for the shared Ray + Serve: a function of it (a test or a fixture) takes
    ``serve_ray`` or ``shared_reward_service``. Read from its source, since the xdist controller, which schedules,
    does not collect; the workers' collection decides the order within the group."""
    import ast
    try:
        tree = ast.parse(Path(module_path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    asked = {a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for a in n.args.args}
    return bool({SERVE_FIXTURE, SHARED_SERVICE_FIXTURE} & asked)


SERVE_SCOPE = "tests/<shared serve modules>"


@pytest.hookimpl(optionalhook=True)     # an env without pytest-xdist (`make test-vllm`'s) has no such hook
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadfile``, the modules that share the Ray + Serve go to one worker as one unit of work, one
    after another: split over two workers, each module started a Ray and a Serve of its own (25-50 s apiece on 2
    cores under a busy neighbour) and shut them down again."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    root = Path(str(config.rootpath))

    class SharedServeFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return SERVE_SCOPE if _uses_shared_serve(str(root / module)) else module

    return SharedServeFileScheduling(config, log)


def pytest_collection_modifyitems(session, config, items):
    _shared_service["modules"] = frozenset(_modules_using(items, SHARED_SERVICE_FIXTURE))
    serve_modules = _modules_using(items, SERVE_FIXTURE)
    _serve["modules"] = frozenset(serve_modules)
    if hasattr(config, "workerinput"):
        # an xdist worker: longest module first (every worker sorts alike, so their collections still agree). The
        # shared-Serve modules are one unit of work (pytest_xdist_make_scheduler): they weigh their sum and keep
        # together, test_metrics_scrape.py first
        weight = _module_seconds(config)
        group = {Path(m).name for m in serve_modules}
        if group:
            weight.update(dict.fromkeys(group, sum(weight.get(m, 0.0) for m in group)))
        order = {m: i for i, m in enumerate(dict.fromkeys(str(it.path) for it in items))}
        items.sort(key=lambda it: (-weight.get(it.path.name, 0.0), it.path.name != SERVE_FIRST, order[str(it.path)]))
        return
    if len(serve_modules) > 1:      # one after another, where the first of them was; the rest keep their order
        serve_modules.sort(key=lambda m: not m.endswith(SERVE_FIRST))
        first = next(i for i, it in enumerate(items) if str(it.path) in _serve["modules"])
        group = [it for m in serve_modules for it in items if str(it.path) == m]
        rest = [it for it in items if str(it.path) not in _serve["modules"]]
        items[:] = rest[:first] + group + rest[first:]


@pytest.fixture
def shared_reward_service(serve_ray) -> dict:
    """``{"url", "cfg"}`` of the reward service the integration modules share (deployed on first use)."""
    if _shared_service["cm"] is None:
        from integration_service import running_service
        cm = running_service(serve_ray)
        _shared_service["value"] = cm.__enter__()
        _shared_service["cm"] = cm
    return _shared_service["value"]


def _stop_shared_service() -> None:
    cm = _shared_service["cm"]
    if cm is not None:
        _shared_service["cm"] = _shared_service["value"] = None
        cm.__exit__(None, None, None)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    # trylast: after the runner's own teardown, so a module's fixtures (its app) are gone before Serve is
    nxt = None if nextitem is None else str(nextitem.path)
    if _shared_service["cm"] is not None and nxt not in _shared_service["modules"]:
        _stop_shared_service()
    if _serve["value"] is not None and nxt not in _serve["modules"]:
        _stop_serve()


def train_sh_env(tmp_path, tiny_model_path, **over) -> dict:
    """The environment of a `scripts/train.sh` run on the tiny random Llama: its own embedded Ray and reward
    service on free loopback ports, no Redis, steps of a few short samples; ``over`` beats every value."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.update({
        "MODEL_PATH": tiny_model_path, "SAVE_PATH": str(tmp_path / "run"), "CKPT_PATH": str(tmp_path / "ckpt"),
        "PROMPT_DATA": "halueval:train", "MAX_SAMPLES": "32", "ROLLOUT_BATCH_SIZE": "2", "N_SAMPLES_PER_PROMPT": "2",
        "GENERATE_MAX_LEN": "8", "PROMPT_MAX_LEN": "128", "TRAIN_BATCH_SIZE": "4", "MICRO_TRAIN_BATCH_SIZE": "4",
        "MICRO_ROLLOUT_BATCH_SIZE": "4", "ADVANTAGE_ESTIMATOR": "rloo", "KL_COEF": "0", "MAX_STEPS": "6",
        "SAVE_STEP": "2", "MAX_CKPT_NUM": "2", "ROLLOUT_BACKEND": "hf", "ROLLOUT_DTYPE": "fp32",
        "NUM_CPUS_PER_ACTOR": "0.25", "VERIFIER_NUM_CPUS": "0.2", "REWARD_NUM_CPUS": "0.2", "REDIS_URL": "",
        "SEED": "3", "SERVE_PORT": str(free_port()), "DASHBOARD_PORT": str(free_port()), "CPU_THREADS": "1"})
    env.update(over)
    return env


@pytest.fixture(scope="session")
def embedded_model_path() -> str:
    from core.model_loader import resolve_model_path
    return resolve_model_path("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def halueval_test_items():
    from core.data import load_halueval
    return load_halueval("test")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory, embedded_model_path) -> str:
    """A 2-layer random Llama (hidden 64) with SmolLM2's tokenizer, for tests about mechanics, not the model
    (dispatch over ranks, checkpoints, LoRA). Built once per session; tests only read it."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM
    out = tmp_path_factory.mktemp("tiny-llama")
    c = AutoConfig.from_pretrained(embedded_model_path)
    c.update({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16})
    torch.manual_seed(0)
    LlamaForCausalLM(c).save_pretrained(out)
    AutoTokenizer.from_pretrained(embedded_model_path).save_pretrained(out)
    return str(out)
