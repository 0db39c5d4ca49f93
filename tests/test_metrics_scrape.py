"""Monitoring: the project's metrics reach Ray's Prometheus endpoint, and the Grafana dashboard reads
only metrics (and tags) that the catalogue declares.

The scrape test runs the real reward service on an embedded Ray with a metrics export port, sends
real reward requests over HTTP (the service's replicas record their metrics), records every
catalogue metric from the driver too, then scrapes http://127.0.0.1:<port>/metrics until the names
show up (Ray exports periodically, so the wait is a bounded loop).
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest

from core.metrics import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "rlfh-dashboard.json"
PREFIX = "ray_"          # Ray's Prometheus exporter prefixes application metric names with ray_
HIST_SUFFIXES = ("_bucket", "_sum", "_count")
TOKEN = "scrape-test-token"


# ------------------------------------------------------------------------------------------ dashboard vs catalogue
def _exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append(t["expr"])
    return out


def _catalogue_name(prom_name: str) -> tuple[str, str]:
    """ray_rlfh_x_bucket -> (rlfh_x, "_bucket"); fails for a name the catalogue does not declare."""
    assert prom_name.startswith(PREFIX), prom_name
    name = prom_name[len(PREFIX):]
    if name in CATALOGUE:
        return name, ""
    for suf in HIST_SUFFIXES:
        if name.endswith(suf) and name[: -len(suf)] in CATALOGUE:
            return name[: -len(suf)], suf
    pytest.fail(f"the Grafana dashboard reads {prom_name}, which is not in core.metrics.CATALOGUE "
                f"(as ray_<name>, or ray_<histogram>_bucket/_sum/_count)")


def test_dashboard_metric_names_exist_in_the_catalogue():
    exprs = _exprs()
    assert len(exprs) >= 10
    used = set()
    for expr in exprs:
        names = re.findall(r"\b(ray_rlfh_[a-z0-9_]+)", expr)
        assert names, f"a panel query reads no project metric: {expr}"
        for prom in names:
            name, suffix = _catalogue_name(prom)
            spec = CATALOGUE[name]
            used.add(name)
            if suffix:
                assert spec.kind == "histogram", f"{prom}: {name} is a {spec.kind}, it has no {suffix} series"
            elif spec.kind == "histogram":
                pytest.fail(f"{prom}: a histogram is read through _bucket/_sum/_count")
            # tags in selectors {tag="..."} must be declared tag keys
            for sel in re.findall(re.escape(prom) + r"\{([^}]*)\}", expr):
                for tag in re.findall(r"([a-zA-Z_]+)\s*[!=~]", sel):
                    assert tag in spec.tag_keys, f"{prom}{{{sel}}}: {name} has no tag {tag!r} ({spec.tag_keys})"
        # rate()/increase() only over counters and histogram series
        for fn, prom in re.findall(r"\b(rate|increase)\(\s*(ray_rlfh_[a-z0-9_]+)", expr):
            name, suffix = _catalogue_name(prom)
            assert CATALOGUE[name].kind == "counter" or suffix, f"{fn}({prom}): {name} is a {CATALOGUE[name].kind}"
        # by (...) groups only on declared tags (le for histogram quantiles)
        metric_tags = set()
        for prom in names:
            metric_tags |= set(CATALOGUE[_catalogue_name(prom)[0]].tag_keys)
        for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
            for tag in (g.strip() for g in group.split(",")):
                assert tag == "le" or tag in metric_tags, f"`by ({group})` in {expr!r}: {tag!r} is no tag of it"
    missing = set(CATALOGUE) - used
    assert not missing, f"catalogue metrics with no dashboard panel: {sorted(missing)}"


def test_dashboard_has_the_required_panels():
    titles = " | ".join(p["title"].lower() for p in json.loads(DASHBOARD.read_text())["panels"])
    for needle in ("reward mean", "label mix", "statements per response", "verifier latency p50 / p99",
                   "cache hit rate", "step time by phase", "skipped batches"):
        assert needle in titles, f"no panel titled like {needle!r}"


def test_chart_ships_the_same_dashboard():
    assert (ROOT / "helm" / "rlfh" / "files" / "rlfh-dashboard.json").read_text() == DASHBOARD.read_text()


def test_histogram_boundaries_are_valid_for_ray():
    for spec in CATALOGUE.values():
        if spec.kind == "histogram":
            b = list(spec.boundaries)
            assert b and all(x > 0 for x in b) and b == sorted(set(b)), \
                f"{spec.name}: Ray needs positive, increasing boundaries, got {b}"


# ------------------------------------------------------------------------------------------ real scrape
def parse_prometheus(text: str) -> dict[str, list[tuple[dict, float]]]:
    """Prometheus text format -> {name: [(labels, value)]} (enough of the format for Ray's exporter)."""
    out: dict[str, list] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(4))))
    return out


def scrape_until(url: str, ready, timeout_s: float = 90.0) -> dict:
    """Scrape every 2 s until ``ready(parsed)`` is true or ``timeout_s`` passes; returns the last scrape."""
    deadline = time.monotonic() + timeout_s
    parsed: dict = {}
    while True:
        try:
            parsed = parse_prometheus(httpx.get(url, timeout=10).text)
        except httpx.HTTPError:
            parsed = {}
        if ready(parsed) or time.monotonic() > deadline:
            return parsed
        time.sleep(2.0)


def _value(parsed, name, **labels) -> float:
    return sum(v for lab, v in parsed.get(name, []) if all(lab.get(k) == str(x) for k, x in labels.items()))


@pytest.fixture(scope="module")
def reward_service_with_metrics(serve_ray):
    """On the Ray + Serve the service modules share (tests/conftest.py): its metrics export port is scraped. This
    module is the first of them to run, so every count below comes from this test's own requests."""
    from core.config import RLFHConfig

    cfg = RLFHConfig.load(environ={}, reward_api_token=TOKEN)
    with serve_ray.app(cfg) as url:
        yield url, serve_ray.metrics_url


@pytest.mark.slow
def test_project_metrics_reach_the_prometheus_endpoint(reward_service_with_metrics, halueval_test_items):
    from core import metrics

    url, metrics_url = reward_service_with_metrics
    items = [{"question": it.question, "response": it.right_answer if i % 2 == 0 else it.hallucinated_answer,
              "materials": it.knowledge} for i, it in enumerate(halueval_test_items[:4])]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
        for chunk in (items[:2], items[2:], items[:2]):          # the repeat is served from the cache
            r = http.post("/v1/rewards", json={"items": chunk})
            assert r.status_code == 200, r.text
        assert http.post("/v1/rewards", json={"items": []}).status_code == 422

    # the driver side: every catalogue metric once, with a recognisable tag value
    for spec in CATALOGUE.values():
        tags = {k: "scrape-test" for k in spec.tag_keys}
        if spec.kind == "counter":
            metrics.inc(spec.name, 2, tags)
        elif spec.kind == "gauge":
            metrics.set_gauge(spec.name, 0.75, tags)
        else:
            metrics.observe(spec.name, 3.0, tags)

    def names_of(parsed):
        return {n[len(PREFIX):].removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
                for n in parsed if n.startswith(PREFIX + "rlfh_")}

    def ready(parsed):
        # every count the asserts below read: the replicas export on their own schedule, so a scrape can see the
        # first verify request before the fourth (CI at 6ea96f1 saw 1 of 4)
        return (set(CATALOGUE) <= names_of(parsed)
                and _value(parsed, "ray_rlfh_reward_requests_total", route="/v1/rewards", status="200") >= 3
                and _value(parsed, "ray_rlfh_reward_requests_total", route="/v1/rewards", status="422") >= 1
                and _value(parsed, "ray_rlfh_verify_requests_total", backend="evidence") >= 4
                and _value(parsed, "ray_rlfh_verify_latency_ms_count", backend="evidence") >= 4
                and _value(parsed, "ray_rlfh_cache_requests_total", result="hit") >= 2)

    parsed = scrape_until(metrics_url, ready)
    missing = set(CATALOGUE) - names_of(parsed)
    assert not missing, f"not exported within 90 s: {sorted(missing)}"
    # recorded by the service replicas while answering real requests
    assert _value(parsed, "ray_rlfh_reward_requests_total", route="/v1/rewards", status="200") >= 3
    assert _value(parsed, "ray_rlfh_reward_requests_total", route="/v1/rewards", status="422") >= 1
    assert _value(parsed, "ray_rlfh_verify_requests_total", backend="evidence") >= 4
    assert _value(parsed, "ray_rlfh_verify_latency_ms_count", backend="evidence") >= 4
    assert sum(v for lab, v in parsed["ray_rlfh_statements_total"] if lab.get("label") != "scrape-test") > 0
    assert _value(parsed, "ray_rlfh_cache_requests_total", result="hit") >= 2
    service_mean = [v for lab, v in parsed["ray_rlfh_reward_mean"] if lab.get("source") == "service"]
    assert service_mean, "the reward service did not export rlfh_reward_mean{source=service}"
    # recorded by the driver
    assert _value(parsed, "ray_rlfh_skipped_batches_total", reason="scrape-test") == 2
    assert _value(parsed, "ray_rlfh_step_time_seconds", phase="scrape-test") == 0.75
    assert _value(parsed, "ray_rlfh_statements_per_response_count") >= 5
