"""The README and docs/ state current facts, not a lab log: no run or session tags, no route into the diary.

Run tags are the names experiments got while the recipe was being found ("W48", "session 31", "F42", "A15",
"e7", "ws30", "X1", "attempt S"). They mean something only to whoever kept the diary (experiments/), so a figure
in the docs carries its machine, date, command and commit instead. Fast: text only.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The tag shapes the diary (experiments/2026-11-diary.md) used. Each alternative is narrow enough to leave real
#: words alone: A100 / A10 / A40 GPUs, W&B, F1 scores, fp32 / bf16, HTTP codes, 1e-6, e2e, H100, flake8's F401.
RUN_TAG = re.compile(
    r"\bW\d+\b"                          # W1 ... W48: a numbered run
    r"|\b[Ss]essions? \d+"               # session 25, sessions 28 to 31
    r"|\bF\d{2}\b"                       # F42 (two digits: F1 is a score, F401 a lint code)
    r"|\bA(?!10\b|16\b|30\b|40\b)\d{1,2}\b"  # A15 (not the A10 / A16 / A30 / A40 GPUs; A100 has three digits)
    r"|\bX\d+\b"                         # X1, X2
    r"|\be\d+\b"                         # e7, e24 (1e-6 and e2e do not match: no word boundary)
    r"|\bwsw?\d+"                        # ws30, wsw60, ws40e3: warm-start folders
    r"|\battempts? [A-Z]\d*\b"           # attempt S, attempts J, P, Q
)

#: What the README and docs/ are, as a user reads them.
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md"),
               ROOT / "bench" / "data" / "REAL_ANSWERS_GUIDE.md", ROOT / "evaluation" / "shipped" / "README.md"])


def run_tags(text: str) -> list[tuple[int, str]]:
    """(line number, tag) for every run or session tag in ``text``."""
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1) for m in RUN_TAG.finditer(line)]


@pytest.mark.parametrize("tag", ["W48", "W1", "session 30", "Session 24", "sessions 28 to 31", "F42", "A15", "e7",
                                 "e24", "ws30", "wsw60", "ws40e3", "X1", "attempt S", "attempts J, P, Q",
                                 "projected from W32's stages"])
def test_the_pattern_finds_each_tag_shape(tag):
    assert run_tags(f"measured ({tag}) today"), tag


@pytest.mark.parametrize("text", ["one A100 or an A10G", "NVIDIA A40 and A10", "W&B logging", "token F1 of 0.4",
                                  "fp32 / bf16 / fp16", "HTTP 401 or 422", "lr 1e-6", "the e2e test", "one H100",
                                  "noqa: F401", "a 1024x576x1536 product", "AVX512-BF16", "grader v3",
                                  "the session token", "commit e55b275", "S1 and S2 statement ids"])
def test_the_pattern_leaves_ordinary_words_alone(text):
    assert run_tags(text) == [], text


def test_readme_and_docs_name_no_run_tags():
    found = [f"{p.relative_to(ROOT)}:{n}: {tag}" for p in DOCS for n, tag in run_tags(p.read_text())]
    assert not found, ("run or session tags in the README or docs (state the fact with its machine, date, command "
                       "and commit instead; the diary is experiments/):\n" + "\n".join(found))


def test_the_diary_is_outside_docs_and_the_readme_does_not_route_through_it():
    assert not (ROOT / "docs" / "DEMO.md").exists()
    assert list((ROOT / "experiments").glob("*.md")), "the dated diary lives in experiments/"
    routed = [str(p.relative_to(ROOT)) for p in DOCS if p.name != "CONTRIBUTING.md" and "experiments/" in p.read_text()]
    assert not routed, f"these link into experiments/ (only CONTRIBUTING.md may say where history is): {routed}"


def test_relative_links_in_the_readme_and_docs_resolve():
    broken = []
    for p in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", p.read_text()):
            if "://" not in target and not (p.parent / target).exists():
                broken.append(f"{p.relative_to(ROOT)} -> {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)
