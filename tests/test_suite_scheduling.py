"""The suite's own scheduling (tests/conftest.py): under pytest-xdist's ``--dist loadfile`` the modules that share
one Ray + Serve (they ask for ``serve_ray`` or ``shared_reward_service``) are one unit of work for one worker, so
the Ray and the Serve start once; every other module stays a unit of its own."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class _Config:
    """What the scheduler reads of pytest's config: the rootdir, ``--dist`` and two workers (``-n 2``)."""
    rootpath = ROOT

    def __init__(self, dist: str):
        self.dist = dist

    def getvalue(self, name: str):
        return {"dist": self.dist, "tx": ["2*popen"]}[name]


#: The modules that test the reward service over HTTP on the shared Ray + Serve (a new one goes here too).
SHARING = {"test_metrics_scrape.py", "test_service_rewards.py", "test_service_hostile.py", "test_schemathesis.py",
           "test_judge.py", "test_show.py", "test_integrations_openrlhf.py", "test_integrations_trl.py",
           "test_integrations_verl.py"}


def test_the_modules_that_share_the_serve_are_one_unit_of_work():
    from conftest import SERVE_SCOPE, pytest_xdist_make_scheduler
    sched = pytest_xdist_make_scheduler(_Config("loadfile"), None)
    # this module names both fixtures in its text but asks for neither: a unit of its own
    for m in sorted(ROOT.glob("tests/test_*.py")):
        want = SERVE_SCOPE if m.name in SHARING else f"tests/{m.name}"
        assert sched._split_scope(f"tests/{m.name}::test_something[param]") == want, m.name
    # any other --dist keeps xdist's own scheduler
    assert pytest_xdist_make_scheduler(_Config("load"), None) is None
