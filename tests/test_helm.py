"""The Helm chart (helm/rlfh) and the plain KubeRay manifests (deploy/kuberay), through real Helm.

Helm is the Helm v4 SDK bundled in the ``helm-python-sdk`` wheel (no binary, no cluster). Every
rendered object is validated offline: core Kubernetes kinds against the ``kubernetes-validate``
schemas (strict: unknown fields are errors), KubeRay kinds against the CRDs' openAPIV3Schema from
``../shared/kuberay-crds`` (made strict the same way, since the API server would silently prune an
unknown field). Then the wiring: maps reach the RayJob's environment, the RayService serves
/v1/rewards under the Serve config's route_prefix, the Redis URL reaches trainer and services, and
the chart's serveConfigV2 equals ``reward_service.serve_config.serve_config`` for the same settings.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from urllib.parse import urlparse

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from core.config import DEFAULT_INFORMATIVE_MAP, DEFAULT_VERIFICATION_MAP, RLFHConfig
from reward_service.serve_config import ROUTES, serve_config

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "rlfh"
CRD_DIR = ROOT.parent / "shared" / "kuberay-crds"
K8S_VERSION = "1.33.0"
RELEASE, NAMESPACE = "ci", "rlfh-ci"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
sys.path.insert(0, str(ROOT / "deploy"))
import chart_sync  # noqa: E402  (deploy/chart_sync.py: the generator of the chart's generated files)


# ------------------------------------------------------------------------------------------ helpers
def load_values(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def render(values: dict | None = None, release: str = RELEASE, namespace: str = NAMESPACE) -> dict[str, str]:
    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values or {}, name=release, namespace=namespace, is_install=True)


def objects(rendered: dict[str, str]) -> list[dict]:
    out = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        out.extend(d for d in yaml.safe_load_all(text) if d)
    return out


def one(objs: list[dict], kind: str) -> dict:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _strict(schema):
    """Unknown fields become errors wherever the CRD lists the fields (the API server would prune them)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


@pytest.fixture(scope="session")
def crd_validators() -> dict:
    if not CRD_DIR.is_dir():
        pytest.fail(f"KubeRay CRDs not found at {CRD_DIR}: the chart's RayCluster/RayJob/RayService are validated "
                    "against them. They live in the shared folder next to the repository (../shared/kuberay-crds, "
                    "see /work/shared/kuberay-crds/README.md); without them the KubeRay objects cannot be checked.")
    validators = {}
    for f in sorted(CRD_DIR.glob("*.yaml")):
        for crd in yaml.load_all(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            kind = crd["spec"]["names"]["kind"]
            for ver in crd["spec"]["versions"]:
                schema = _strict(ver["schema"]["openAPIV3Schema"])
                validators[(f"{crd['spec']['group']}/{ver['name']}", kind)] = jsonschema.Draft202012Validator(schema)
    for kind in ("RayCluster", "RayJob", "RayService"):
        assert ("ray.io/v1", kind) in validators, f"{CRD_DIR} has no ray.io/v1 {kind} CRD"
    return validators


def validate_object(obj: dict, crd_validators: dict) -> None:
    name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    key = (obj["apiVersion"], obj["kind"])
    if obj["apiVersion"].startswith("ray.io/"):
        assert key in crd_validators, f"{name}: no CRD for {key}"
        errors = sorted(crd_validators[key].iter_errors(obj), key=lambda e: list(e.absolute_path))
        assert not errors, f"{name} does not match the KubeRay CRD:\n  " + "\n  ".join(
            f"{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in errors[:10])
        for meta_labels in _all_labels(obj):
            _check_labels(name, meta_labels)
    else:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{name} is not a valid Kubernetes {K8S_VERSION} object at "
                        f"{'/'.join(map(str, e.absolute_path))}: {e.message}")


def _all_labels(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "labels" and isinstance(v, dict):
                yield v
            else:
                yield from _all_labels(v)
    elif isinstance(obj, list):
        for x in obj:
            yield from _all_labels(x)


def _check_labels(name: str, labels: dict) -> None:
    """CRD schemas only say "map of strings"; check label syntax as the API server would."""
    import re
    value_re = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    for k, v in labels.items():
        assert isinstance(v, str) and len(v) <= 63 and value_re.match(v), f"{name}: bad label value {k}={v!r}"


def containers_of(obj: dict) -> list[dict]:
    """Every Ray container of a RayCluster / RayJob / RayService (head and worker groups)."""
    spec = obj["spec"]
    cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or (spec if obj["kind"] == "RayCluster" else None)
    if cluster is None:
        return []
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster.get("workerGroupSpecs", [])]
    return [p["spec"]["containers"][0] for p in pods]


def secret_ref(container: dict, env: str):
    for e in container.get("env", []):
        if e["name"] == env:
            ref = e["valueFrom"]["secretKeyRef"]
            return ref["name"], ref["key"]
    return None


def env_configmap(objs: list[dict]) -> dict:
    found = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-env")]
    assert len(found) == 1
    return found[0]


# Typed values -> env var (the chart's first-class settings), to check they reach the ConfigMap.
TYPED = {
    ("rewards", "granularity"): "GRANULARITY", ("rewards", "placement"): "REWARD_PLACEMENT",
    ("rewards", "verificationMap"): "VERIFICATION_MAP", ("rewards", "informativeMap"): "INFORMATIVE_MAP",
    ("rewards", "infoWeight"): "INFO_WEIGHT", ("verifier", "backend"): "VERIFIER_BACKEND",
    ("verifier", "modelUrl"): "MODEL_URL", ("train", "advantageEstimator"): "ADVANTAGE_ESTIMATOR",
    ("train", "actorLr"): "ACTOR_LR", ("train", "criticLr"): "CRITIC_LR", ("train", "rolloutBatchSize"):
    "ROLLOUT_BATCH_SIZE", ("train", "nSamplesPerPrompt"): "N_SAMPLES_PER_PROMPT", ("train", "maxSteps"): "MAX_STEPS",
    ("train", "dtype"): "DTYPE", ("train", "zeroStage"): "ZERO_STAGE", ("train", "saveStep"): "SAVE_STEP",
    ("actorGroups", "actor", "numGpusPerNode"): "ACTOR_NUM_GPUS_PER_NODE",
    ("actorGroups", "critic", "numGpusPerNode"): "CRITIC_NUM_GPUS_PER_NODE",
    ("actorGroups", "ref", "numGpusPerNode"): "REF_NUM_GPUS_PER_NODE",
    ("actorGroups", "rollout", "numEngines"): "VLLM_NUM_ENGINES",
    ("actorGroups", "rollout", "backend"): "ROLLOUT_BACKEND",
    ("rewardService", "verifier", "replicas"): "VERIFIER_REPLICAS",
    ("rewardService", "maxReplicas"): "SERVE_MAX_REPLICAS",
}


def _get(d: dict, path: tuple):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _as_value(text: str, like):
    """A ConfigMap string read back as the type the values file gave (numbers, bools, maps: JSON).

    Maps are compared on the keys the values file sets: Helm merges a partial map with the defaults.
    """
    if isinstance(like, str):
        return text
    got = json.loads(text)
    return {k: got.get(k) for k in like} if isinstance(like, dict) else got


# ------------------------------------------------------------------------------------------ rendering & schemas
@pytest.fixture(scope="module", params=CI_VALUES, ids=lambda p: p.stem)
def ci_case(request):
    values = load_values(request.param)
    rendered = render(values)
    return request.param.stem, values, rendered, objects(rendered)


def test_three_ci_values_files_exist():
    names = {p.name for p in CI_VALUES}
    assert {"cpu-dev-values.yaml", "gpu-cluster-values.yaml", "external-redis-values.yaml"} <= names, names


def test_generated_chart_files_and_plain_manifests_are_current():
    stale = chart_sync.stale_files()
    assert not stale, ("generated files are stale: run `.venv/bin/python deploy/chart_sync.py` and commit:\n  "
                       + "\n  ".join(stale))


@pytest.mark.parametrize("values_file", [None, *CI_VALUES], ids=lambda p: "defaults" if p is None else p.stem)
def test_helm_lint_is_clean(values_file):
    values = load_values(values_file) if values_file else None
    report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE, kube_version="v" + K8S_VERSION)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], json.dumps(report, indent=1)


def test_every_rendered_object_is_valid(ci_case, crd_validators):
    name, values, rendered, objs = ci_case
    assert objs, f"{name}: nothing rendered"
    for obj in objs:
        validate_object(obj, crd_validators)
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    kinds = {o["kind"] for o in objs}
    assert ("RayJob" in kinds) == values.get("trainJob", {}).get("enabled", True)
    assert ("RayService" in kinds) == values.get("rewardService", {}).get("enabled", True)
    assert ("RayCluster" in kinds) == values.get("rayCluster", {}).get("enabled", False)


def test_defaults_render_valid_objects(crd_validators):
    objs = objects(render())
    assert {o["kind"] for o in objs} >= {"ConfigMap", "Secret", "Deployment", "Service", "RayJob", "RayService"}
    for obj in objs:
        validate_object(obj, crd_validators)


def test_plain_manifests_are_valid(crd_validators):
    seen = set()
    for f in sorted((ROOT / "deploy" / "kuberay").glob("*.yaml")):
        if f.name == "values.yaml":
            continue
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        assert docs, f"{f} is empty"
        for obj in docs:
            validate_object(obj, crd_validators)
            assert "helm.sh/chart" not in obj["metadata"].get("labels", {}), f"{f.name}: Helm label left in"
            seen.add(obj["kind"])
    assert {"RayCluster", "RayJob", "RayService", "ConfigMap", "Secret"} <= seen, seen
    secret = next(d for d in yaml.safe_load_all((ROOT / "deploy/kuberay/raycluster.yaml").read_text())
                  if d and d["kind"] == "Secret")
    assert all("CHANGE-ME" in v for k, v in secret["stringData"].items() if k != "REDIS_URL"), \
        "the plain Secret must hold placeholders, not generated secrets"


# ------------------------------------------------------------------------------------------ wiring
def test_configmap_is_a_valid_config_with_the_values_settings(ci_case):
    name, values, _, objs = ci_case
    data = env_configmap(objs)["data"]
    cfg = RLFHConfig.load(environ=data)          # raises ConfigError naming the variable if the chart wrote junk
    for path, env in TYPED.items():
        want = _get(values, path)
        if want is not None:
            assert _as_value(data[env], want) == want, f"{'.'.join(path)} -> {env}: {data[env]!r} != {want!r}"
    for env, want in (_get(values, ("train", "env")) or {}).items():
        assert _as_value(data[env], want) == want, f"train.env.{env}: {data[env]!r} != {want!r}"
    if _get(values, ("rewards", "verificationMap")):
        assert cfg.verification_map == {**DEFAULT_VERIFICATION_MAP, **values["rewards"]["verificationMap"]}
    if _get(values, ("rewards", "informativeMap")):
        assert cfg.informative_map == {**DEFAULT_INFORMATIVE_MAP, **values["rewards"]["informativeMap"]}
    assert not {"REWARD_API_TOKEN", "MODEL_API_KEY", "REDIS_URL", "RAY_ADDRESS"} & set(data), \
        "secrets / RAY_ADDRESS must not be in the ConfigMap"


def _training_cluster(objs):
    job = [o for o in objs if o["kind"] == "RayJob"]
    if job and "clusterSelector" in job[0]["spec"]:
        target = job[0]["spec"]["clusterSelector"]["ray.io/cluster"]
        cluster = one(objs, "RayCluster")
        assert cluster["metadata"]["name"] == target, "RayJob.clusterSelector names a RayCluster that is not rendered"
        return job[0], cluster
    if job:
        return job[0], job[0]
    return None, ([o for o in objs if o["kind"] == "RayCluster"] or [None])[0]


def test_rayjob_gets_the_environment_and_entrypoint(ci_case):
    name, values, _, objs = ci_case
    job, cluster = _training_cluster(objs)
    if job is None:
        pytest.skip(f"{name}: trainJob disabled")
    cm_name = env_configmap(objs)["metadata"]["name"]
    assert job["spec"]["entrypoint"].endswith("bash scripts/train.sh")
    assert job["spec"]["entrypoint"].startswith("cd /app")
    for c in containers_of(cluster):
        assert {"configMapRef": {"name": cm_name}} in c["envFrom"], f"{c['name']} does not read {cm_name}"
        if _get(values, ("auth", "enabled")) is not False:
            assert secret_ref(c, "REWARD_API_TOKEN"), f"{c['name']} has no REWARD_API_TOKEN"
    data = env_configmap(objs)["data"]
    if values.get("rewardService", {}).get("enabled", True):
        svc = f"{RELEASE}-rlfh-reward-serve-svc"
        prefix = (_get(values, ("rewardService", "routePrefix")) or "/").rstrip("/")
        assert data["REWARD_URL"] == f"http://{svc}.{NAMESPACE}.svc:8000{prefix}"


def test_gpu_workers_request_gpus():
    values = load_values(CHART / "ci" / "gpu-cluster-values.yaml")
    job = one(objects(render(values)), "RayJob")
    groups = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    gpu = next(g for g in groups if g["groupName"] == "gpu")
    res = gpu["template"]["spec"]["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == values["ray"]["workerGroups"]["gpu"]["gpusPerWorker"]
    assert gpu["replicas"] == 2 and [g["groupName"] for g in groups] == ["gpu"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert "nvidia.com/gpu" not in head["template"]["spec"]["containers"][0]["resources"].get("limits", {})


def test_rayservice_serves_the_reward_route(ci_case):
    name, values, _, objs = ci_case
    svc = [o for o in objs if o["kind"] == "RayService"]
    if not svc:
        pytest.skip(f"{name}: rewardService disabled")
    svc = svc[0]
    conf = yaml.safe_load(svc["spec"]["serveConfigV2"])
    app = conf["applications"][0]
    prefix = _get(values, ("rewardService", "routePrefix")) or "/"
    assert app["route_prefix"] == prefix and app["import_path"] == "reward_service.app:app_builder"
    reward_path = prefix.rstrip("/") + "/v1/rewards"
    assert "/v1/rewards" in ROUTES and reward_path.startswith(app["route_prefix"].rstrip("/") + "/")
    assert conf["http_options"] == {"host": "0.0.0.0", "port": 8000}
    for c in containers_of(svc):
        assert {"containerPort": 8000, "name": "serve"} in c["ports"], f"{c['name']} does not expose the Serve port"
    ing = [o for o in objs if o["kind"] == "Ingress"]
    if values.get("ingress", {}).get("enabled"):
        backend = ing[0]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
        assert backend == {"name": f"{svc['metadata']['name']}-serve-svc", "port": {"number": 8000}}
        assert ing[0]["spec"]["rules"][0]["host"] == values["ingress"]["host"]
    else:
        assert not ing


def test_chart_serve_config_equals_serve_config_module(ci_case):
    """The chart mirrors reward_service.serve_config.serve_config; for the same settings they must agree."""
    name, values, _, objs = ci_case
    svc = [o for o in objs if o["kind"] == "RayService"]
    if not svc:
        pytest.skip(f"{name}: rewardService disabled")
    chart_doc = yaml.safe_load(svc[0]["spec"]["serveConfigV2"])
    cfg = RLFHConfig.load(environ=env_configmap(objs)["data"])
    py_doc = serve_config(cfg, route_prefix=_get(values, ("rewardService", "routePrefix")) or "/")
    chart_app, py_app = chart_doc["applications"][0], py_doc["applications"][0]
    assert set(chart_app["args"]) == set(py_app["args"])
    assert RLFHConfig.load(environ=chart_app["args"]) == RLFHConfig.load(environ=py_app["args"]), \
        "serveConfigV2 args mean other settings than serve_config(cfg)"
    strip = lambda doc: {**doc, "applications": [{k: v for k, v in a.items() if k != "args"}
                                                  for a in doc["applications"]]}
    assert strip(chart_doc) == strip(py_doc)
    from ray.serve.schema import ServeDeploySchema
    ServeDeploySchema(**chart_doc)     # what `serve deploy` / KubeRay hands to Serve


def test_redis_url_reaches_trainer_and_services(ci_case):
    name, values, _, objs = ci_case
    mode = _get(values, ("redis", "mode")) or "bundled"
    _, cluster = _training_cluster(objs)
    svc = [o for o in objs if o["kind"] == "RayService"]
    containers = (containers_of(cluster) if cluster else []) + (containers_of(svc[0]) if svc else [])
    assert containers
    refs = {secret_ref(c, "REDIS_URL") for c in containers}
    if mode == "none":
        assert refs == {None}
        return
    assert len(refs) == 1 and None not in refs, f"{name}: REDIS_URL refs differ or are missing: {refs}"
    ref = refs.pop()
    if mode == "external" and values["redis"]["external"].get("existingSecret"):
        assert ref == (values["redis"]["external"]["existingSecret"], values["redis"]["external"]["existingSecretKey"])
        assert not [o for o in objs if o["kind"] == "Secret"], "nothing for the chart to keep in a Secret"
        return
    secret = one(objs, "Secret")
    assert ref == (secret["metadata"]["name"], "REDIS_URL")
    url = urlparse(secret["stringData"]["REDIS_URL"])
    if mode == "bundled":
        service = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"].endswith("-redis"))
        deploy = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-redis"))
        assert url.hostname == service["metadata"]["name"] and url.port == service["spec"]["ports"][0]["port"]
        assert url.password == secret["stringData"]["REDIS_PASSWORD"] and len(url.password) >= 16
        pw_ref = deploy["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]
        assert (pw_ref["name"], pw_ref["key"]) == (secret["metadata"]["name"], "REDIS_PASSWORD")
        assert service["spec"]["selector"] == deploy["spec"]["template"]["metadata"]["labels"]


def test_every_secret_reference_resolves(ci_case):
    """Each secretKeyRef names a key of a Secret the chart renders, or an existingSecret the values declare."""
    name, values, _, objs = ci_case
    rendered = {o["metadata"]["name"]: set(o.get("stringData", {})) for o in objs if o["kind"] == "Secret"}
    declared = {(_get(values, p + ("existingSecret",)), _get(values, p + ("existingSecretKey",)))
                for p in [("auth",), ("verifier",), ("redis", "external")]}

    def walk(x):
        if isinstance(x, dict):
            if "secretKeyRef" in x:
                yield x["secretKeyRef"]["name"], x["secretKeyRef"]["key"]
            for v in x.values():
                yield from walk(v)
        elif isinstance(x, list):
            for v in x:
                yield from walk(v)
    refs = {r for o in objs for r in walk(o)}
    assert refs
    for sname, key in refs:
        assert key in rendered.get(sname, set()) or (sname, key) in declared, f"{name}: dangling ref {sname}/{key}"


def test_network_policies_isolate_redis_and_open_the_reward_port():
    values = load_values(CHART / "ci" / "gpu-cluster-values.yaml")
    objs = objects(render(values))
    pols = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkPolicy"}
    redis_pol = pols[f"{RELEASE}-rlfh-redis"]
    [rule] = redis_pol["spec"]["ingress"]
    assert rule["ports"] == [{"port": 6379, "protocol": "TCP"}]
    assert rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE
    ray_pol = pols[f"{RELEASE}-rlfh-ray"]
    serve_rule = next(r for r in ray_pol["spec"]["ingress"] if r.get("ports") == [{"port": 8000, "protocol": "TCP"}])
    assert values["networkPolicy"]["serveFrom"][0] in serve_rule["from"]
    op_rule = next(r for r in ray_pol["spec"]["ingress"] if {"port": 8265, "protocol": "TCP"} in r.get("ports", []))
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}}} in op_rule["from"]


def test_model_and_data_locations():
    values = load_values(CHART / "ci" / "gpu-cluster-values.yaml")
    objs = objects(render(values))
    data = env_configmap(objs)["data"]
    assert data["MODEL_PATH"] == "/mnt/model/Qwen2.5-7B-Instruct"
    assert data["PROMPT_DATA"] == "/mnt/data/train.jsonl"
    assert data["SAVE_PATH"] == "/mnt/output/qwen7b-rlfh"
    pod = one(objs, "RayJob")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["model"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert vols["output"]["persistentVolumeClaim"] == {"claimName": "rlfh-runs"}
    assert "emptyDir" in vols["data"]
    [fetch] = pod["initContainers"]
    assert fetch["name"] == "fetch-data" and ":s3:my-bucket/rlfh/prompts" in fetch["args"]
    assert fetch["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/mnt/model", "/mnt/data", "/mnt/output", "/dev/shm"} <= mounts


def test_defaults_match_rlfhconfig_defaults():
    """values.yaml's typed settings carry RLFHConfig's defaults (except what the chart must place)."""
    data = env_configmap(objects(render()))["data"]
    chart_cfg, default_cfg = RLFHConfig.load(environ=data), RLFHConfig.load({})
    placed = {"save_path", "serve_host", "serve_port", "reward_url"}
    diffs = {n: (getattr(chart_cfg, n), getattr(default_cfg, n)) for n in RLFHConfig.model_fields
             if n not in placed and getattr(chart_cfg, n) != getattr(default_cfg, n)}
    assert not diffs, f"values.yaml defaults differ from RLFHConfig: {diffs}"
    import ray
    assert load_values(CHART / "values.yaml")["rayVersion"] == ray.__version__


def test_a_recipe_runs_with_only_the_values_set_over_it():
    """train.recipe reaches the pod as RECIPE; a typed setting left null is not written, so the recipe's value
    holds, and one that is set beats the recipe (scripts/train.sh's precedence)."""
    from core.config import read_recipe
    recipe = {env: value for env, (value, _) in read_recipe("grounded")[0].items()}
    data = env_configmap(objects(render({"train": {"recipe": "grounded", "actorLr": 2.5e-6}})))["data"]
    assert data["RECIPE"] == "grounded" and float(data["ACTOR_LR"]) == 2.5e-6
    for env in ("ADVANTAGE_ESTIMATOR", "KL_COEF", "ROLLOUT_BATCH_SIZE", "N_SAMPLES_PER_PROMPT", "TRAIN_BATCH_SIZE",
                "MAX_STEPS", "PROMPT_DATA", "VERIFIER_BACKEND", "GRANULARITY"):
        assert env not in data, f"{env} is written though its value is null: it would override the recipe"
    cfg = RLFHConfig.load(environ=data)
    assert cfg.actor_lr == 2.5e-6
    assert cfg.advantage_estimator == recipe["ADVANTAGE_ESTIMATOR"] != RLFHConfig.load({}).advantage_estimator
    assert (cfg.kl_coef, cfg.train_batch_size, cfg.max_steps) == \
        (recipe["KL_COEF"], recipe["TRAIN_BATCH_SIZE"], recipe["MAX_STEPS"])
    assert "RECIPE" not in env_configmap(objects(render()))["data"], "no recipe unless one is named"
    # a recipe file of the user's own, by path (the chart cannot see it: the pod's train.sh checks it)
    data = env_configmap(objects(render({"train": {"recipe": "/mnt/data/mine.toml"}})))["data"]
    assert data["RECIPE"] == "/mnt/data/mine.toml"


def test_secrets_are_generated_and_kept_out_of_the_serve_config():
    objs = objects(render())
    secret = one(objs, "Secret")["stringData"]
    assert len(secret["REWARD_API_TOKEN"]) == 32 and secret["REWARD_API_TOKEN"].isalnum()
    other = one(objects(render()), "Secret")["stringData"]
    assert other["REWARD_API_TOKEN"] != secret["REWARD_API_TOKEN"], "a fresh install must get a fresh token"
    conf = one(objs, "RayService")["spec"]["serveConfigV2"]
    for v in secret.values():
        assert v not in conf
    given = one(objects(render({"auth": {"token": "tok-123"}, "verifier": {"apiKey": "k-9"}})), "Secret")["stringData"]
    assert given["REWARD_API_TOKEN"] == "tok-123" and given["MODEL_API_KEY"] == "k-9"


def test_notes_tell_how_to_reach_dashboard_and_endpoint():
    notes = render(load_values(CHART / "ci" / "cpu-dev-values.yaml"))["rlfh/templates/NOTES.txt"]
    assert f"kubectl port-forward -n {NAMESPACE} svc/{RELEASE}-rlfh-head-svc 8265:8265" in notes
    assert f"svc/{RELEASE}-rlfh-reward-head-svc 8265:8265" in notes
    assert f"svc/{RELEASE}-rlfh-reward-serve-svc 8000:8000" in notes
    assert "/v1/rewards" in notes and "rlfh submit --address http://127.0.0.1:8265" in notes


# ------------------------------------------------------------------------------------------ bad values
BAD_VALUES = [
    ({"ray": {"workerGroups": {"gpu": {"gpusPerWorker": -1}}}}, "/ray/workerGroups/gpu/gpusPerWorker", "minimum"),
    ({"actorGroups": {"actor": {"numGpusPerNode": -2}}}, "/actorGroups/actor/numGpusPerNode", "minimum"),
    ({"rewards": {"granularity": "tokens"}}, "/rewards/granularity", "token"),
    ({"rewards": {"verificationMap": {"Correctish": 1.0}}}, "/rewards/verificationMap", "Correctish"),
    ({"rewards": {"informativeMap": {"6": 1.0}}}, "/rewards/informativeMap", "'6'"),
    ({"rewards": {"infoWeight": "high"}}, "/rewards/infoWeight", "want number"),
    ({"rewards": {"verificationMap": {"Wrong": "minus one"}}}, "/rewards/verificationMap/Wrong", "want number"),
    ({"train": {"env": {"GRANULARTY": "token"}}}, "/train/env", "GRANULARTY"),
    ({"train": {"env": {"KL_ESTIMATOR": "k9"}}}, "/train/env/KL_ESTIMATOR", "k1"),
    ({"train": {"env": {"MAX_SAMPLES": 0}}}, "/train/env/MAX_SAMPLES", "minimum"),
    ({"train": {"env": {"GRANULARITY": "sentence"}}}, "train.env.GRANULARITY", "rewards.granularity"),
    ({"train": {"env": {"REDIS_URL": "redis://h:6379"}}}, "train.env.REDIS_URL", "Secret"),
    ({"train": {"advantageEstimator": "grpo", "nSamplesPerPrompt": 1}}, "train.nSamplesPerPrompt", ">= 2"),
    ({"train": {"recipe": "grounde"}}, "train.recipe", "grounded"),
    ({"train": {"env": {"RECIPE": "grounded"}}}, "/train/env", "'RECIPE' not allowed"),
    ({"train": {"recipe": "../x y"}}, "/train/recipe", "pattern"),
    ({"verifier": {"backend": "llm"}}, "verifier.modelUrl", "llm"),
    ({"actorGroups": {"actor": {"numGpusPerNode": 2}}}, "ray.workerGroups.gpu", "actorGroups need 3 GPUs"),
    ({"ray": {"auth": "oauth"}}, "/ray/auth", "token"),
    ({"redis": {"mode": "external"}}, "redis.external.url", "external"),
    ({"redis": {"mode": "sentinel"}}, "/redis/mode", "bundled"),
    ({"model": {"uri": "http://example.com/m"}}, "/model/uri", "pattern"),
    ({"rewardService": {"routePrefix": "v1"}}, "/rewardService/routePrefix", "pattern"),
    ({"rewardService": {"maxReplicas": 1, "verifier": {"replicas": 2}}}, "rewardService.maxReplicas", ">="),
    ({"trainJob": {"submissionMode": "Batch"}}, "/trainJob/submissionMode", "K8sJobMode"),
    ({"trainJob": {"useRayCluster": True}}, "rayCluster.enabled", "useRayCluster"),
    ({"ingress": {"enabled": True}, "rewardService": {"enabled": False}}, "rewardService.enabled", "ingress"),
    ({"rewardz": {}}, "additional properties 'rewardz'", ""),
]


@pytest.mark.parametrize("bad,field,hint", BAD_VALUES, ids=[b[1] + ":" + b[2] for b in BAD_VALUES])
def test_bad_values_are_rejected_naming_the_field(bad, field, hint):
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as e:
        render(bad)
    msg = str(e.value)
    assert field in msg and hint in msg, f"message does not name {field!r} / {hint!r}:\n{msg}"


def test_a_bad_ci_values_file_is_rejected(tmp_path):
    """A whole values file, as `helm install -f` reads it, fails lint naming the field."""
    bad = deep_merge(load_values(CHART / "ci" / "cpu-dev-values.yaml"),
                     {"rewards": {"verificationMap": {"Halfway": 0.1}}, "ray": {"workerGroups": {"gpu": {"gpusPerWorker": -4}}}})
    report = helm.lint(str(CHART), bad, strict=True)
    text = "\n".join(report["errors"])
    assert "/rewards/verificationMap" in text and "Halfway" in text
    assert "/ray/workerGroups/gpu/gpusPerWorker" in text
