"""Placement settings without a Ray cluster: the *_NODE_RESOURCE settings become custom resources in each role's
bundles (and in the Serve replicas' options), a resource no node offers is a ConfigError naming the setting, roles
that must share a node cannot name two, and `rlfh chaos` finds a node's raylet by the resource it offers or its id.
The real multi-node run is tests/test_multinode.py."""
from __future__ import annotations

import pytest

from actors import group
from ops import chaos
from core.config import ConfigError, RLFHConfig
from core.placement import check_node_resources

PLACED = dict(actor_node_resource="rlfh_train", critic_node_resource="rlfh_train", ref_node_resource="rlfh_rollout",
              rollout_node_resource="rlfh_rollout", advantage_estimator="gae", kl_coef=0.01, rollout_backend="hf")


def _cfg(**kw) -> RLFHConfig:
    return RLFHConfig.load(environ={}, **kw)


def test_bundles_ask_for_their_roles_node_resource_with_the_strategy(monkeypatch):
    made, checked = [], []
    monkeypatch.setattr(group, "check_node_resources", lambda cfg, roles: checked.append(sorted(roles)))
    monkeypatch.setattr(group, "_make_pg", lambda bundles, roles, timeout_s, strategy: made.append(
        (tuple(roles), bundles, strategy)) or object())
    monkeypatch.setattr(group, "bundle_nodes", lambda pg: ("n1",))
    p = group.plan_placement(_cfg(**PLACED, placement_strategy="SPREAD", vllm_num_engines=1))
    assert checked == [["critic", "policy", "reference", "rollout"]]
    assert {roles: (bundles, strategy) for roles, bundles, strategy in made} == {
        ("policy",): ([{"CPU": 0.25, "rlfh_train": 0.001}], "SPREAD"),
        ("critic",): ([{"CPU": 0.25, "rlfh_train": 0.001}], "SPREAD"),
        ("reference",): ([{"CPU": 0.25, "rlfh_rollout": 0.001}], "SPREAD"),
        ("rollout",): ([{"CPU": 0.25, "rlfh_rollout": 0.001}], "SPREAD")}
    assert p["rollout"].node_resource == "rlfh_rollout" and p.nodes_of() == {"n1": ["policy", "critic", "reference",
                                                                                     "rollout"]}
    # no setting: the bundles are as before (CPU only, PACK)
    made.clear()
    group.plan_placement(_cfg(vllm_num_engines=1, kl_coef=0.0, advantage_estimator="rloo"))
    assert [(b, s) for _, b, s in made] == [([{"CPU": 0.25}], "PACK"), ([{"CPU": 0.25}], "PACK")]


def test_a_resource_no_node_offers_names_the_setting():
    cfg = _cfg(**PLACED, service_node_resource="rlfh_service")
    roles = ["policy", "critic", "reference", "rollout", "service"]
    check_node_resources(cfg, roles, {"CPU": 3, "rlfh_train": 1, "rlfh_rollout": 1, "rlfh_service": 1})
    with pytest.raises(ConfigError) as info:
        check_node_resources(cfg, roles, {"CPU": 3, "rlfh_train": 1, "node:127.0.0.1": 1})
    msg = str(info.value)
    assert "REF_NODE_RESOURCE (--ref-node-resource) and ROLLOUT_NODE_RESOURCE (--rollout-node-resource) = " \
           "'rlfh_rollout': no live node" in msg
    assert "SERVICE_NODE_RESOURCE (--service-node-resource) = 'rlfh_service'" in msg
    assert "(the nodes offer: rlfh_train)" in msg and "ray start --resources" in msg
    check_node_resources(_cfg(), roles, {"CPU": 1})      # nothing named: nothing to check


def test_roles_that_share_a_node_cannot_name_two_and_auto_layout_goes_separate():
    with pytest.raises(ConfigError, match="COLOCATE_ACTOR_REF puts policy \\+ reference in the same bundles.*"
                                          "REF_NODE_RESOURCE"):
        group.plan_placement(_cfg(**PLACED, colocate_actor_ref=True), create=False)
    assert group.resolve_layout(_cfg(**PLACED), "hf") == "separate"
    assert group.resolve_layout(_cfg(rollout_backend="hf", actor_node_resource="rlfh_train",
                                     rollout_node_resource="rlfh_train", critic_node_resource="rlfh_train",
                                     kl_coef=0.0), "hf") == "colocated"
    with pytest.raises(ConfigError, match="MODEL_LAYOUT=colocated: the roles are placed on different nodes"):
        group.resolve_layout(_cfg(**PLACED, model_layout="colocated"), "hf")
    with pytest.raises(ConfigError, match="ROLLOUT_NODE_RESOURCE .* 'a b'"):
        _cfg(rollout_node_resource="a b")


def test_the_serve_config_places_the_replicas_on_the_service_node():
    from reward_service.serve_config import serve_config
    deps = serve_config(_cfg(service_node_resource="rlfh_service"))["applications"][0]["deployments"]
    assert [d["ray_actor_options"] for d in deps] == [{"num_cpus": 0.25, "resources": {"rlfh_service": 0.001}}] * 2
    deps = serve_config(_cfg())["applications"][0]["deployments"]
    assert [d["ray_actor_options"] for d in deps] == [{"num_cpus": 0.25}] * 2


def test_chaos_finds_a_node_by_its_resource_or_id():
    line = ["/x/raylet", "--node_id=4f2a9c0d11", "--static_resource_list=CPU,1.0,rlfh_rollout,1.0,memory,5",
            "--node_ip_address=127.0.0.1"]
    assert chaos.raylet_is(line, "rlfh_rollout") and chaos.raylet_is(line, "4f2a9c0d")
    assert not chaos.raylet_is(line, "rlfh_train") and not chaos.raylet_is(line, "1.0")
    assert not chaos.raylet_is(line, "4f2a")          # an id prefix needs 8 hex digits
    with pytest.raises(ValueError, match="role node needs --node"):
        chaos.role_processes(1, "node")
