"""``rlfh show RUN``: what the verifier said about a run's rollouts, as one self-contained HTML page.

RUN is a run's output folder (SAVE_PATH) or the path of a samples.jsonl. The page has, per training step, the
rollouts the run logged (LOG_SAMPLES per step): each response's tokens coloured by the reward the verifier put
on them (red negative, green positive, uncoloured zero; the number on hover), each statement with its label,
its p (the statement's ``confidence``: how sure the verifier is of that label; the claim judge's probability of
it) and informativeness, and the prompt's passages and each statement's evidence folded away. No external
assets: open the file anywhere.
"""
from __future__ import annotations

import argparse
import html
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Iterable, Optional

from cluster.samples_log import Sample, SamplesError, read_samples, samples_path
from core.verify_schema import LABELS

#: Rollouts on the page unless --limit says otherwise: a long run logs thousands, and a page of a few hundred
#: still opens at once.
DEFAULT_LIMIT = 200
#: Colour levels per sign: a token's |reward| relative to the page's largest is put in one of these.
LEVELS = 5
#: |reward| at or below this is shown as zero (the service rounds rewards to 4 decimals in the log).
ZERO = 1e-6

DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "'") + """
Examples:
  rlfh show runs/main                       # writes runs/main/samples.html
  rlfh show runs/main --step 40             # one step
  rlfh show runs/main/samples.jsonl --limit 20 --out /tmp/last20.html
"""

# label colours, best to worst in LABELS' order: Correct, Hedged correct, Vague, Hedged wrong, Wrong
_LABEL_COLOURS = ("#15803d", "#65a30d", "#6b7280", "#ea580c", "#b91c1c")
_RED, _GREEN = (220, 38, 38), (22, 163, 74)

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#111827;background:#f9fafb}
header{background:#fff;border-bottom:1px solid #e5e7eb;padding:12px 24px;position:sticky;top:0;z-index:1}
h1{font-size:18px;margin:0 0 4px}
.src{color:#6b7280;margin:0 0 6px;font-size:12px;word-break:break-all}
.summary{display:flex;flex-wrap:wrap;gap:6px 18px;margin:4px 0}
.summary b{font-weight:600}
.legend{display:flex;flex-wrap:wrap;align-items:center;gap:6px 14px;margin-top:6px;font-size:12px}
.scale{display:inline-flex;vertical-align:middle;border:1px solid #d1d5db}
.scale span{display:inline-block;min-width:34px;text-align:center;padding:1px 2px;font-size:11px}
main{padding:8px 24px 40px;max-width:1200px}
section.step>h2{font-size:16px;margin:18px 0 6px;border-bottom:1px solid #e5e7eb;padding-bottom:2px}
h2 small{font-weight:400;color:#6b7280;font-size:12px}
article{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:8px 12px;margin:8px 0}
.meta{font-size:12px;color:#4b5563}
.q{margin:4px 0;font-weight:600}
details{margin:4px 0}
summary{cursor:pointer;color:#374151;font-size:12px}
details.prompt .passage{white-space:pre-wrap;background:#f3f4f6;padding:6px 8px;border-radius:4px;margin:4px 0;
  font-size:13px}
.resp{white-space:pre-wrap;font-size:15px;border-left:3px solid #d1d5db;padding:4px 8px;margin:6px 0;
  line-height:1.9}
.t{border-radius:2px}
.special{color:#9ca3af;font-size:10px;border:1px dotted #9ca3af;padding:0 2px;margin-left:2px}
ol.st{margin:4px 0 2px;padding-left:22px}
ol.st li{margin:2px 0}
.lab{display:inline-block;color:#fff;border-radius:3px;padding:0 5px;font-size:11px;font-weight:600;white-space:nowrap}
.lab-x{background:#374151}
.p,.info{font-family:ui-monospace,monospace;font-size:12px;color:#374151;margin:0 4px}
.unaligned{color:#b45309;font-size:11px}
.note{color:#6b7280;font-size:12px;font-style:italic}
blockquote{margin:2px 0 2px 8px;padding:2px 8px;border-left:2px solid #d1d5db;color:#4b5563;font-size:12px}
.pos-r{color:#15803d}.neg-r{color:#b91c1c}
"""

_JS = """
document.getElementById('step-select').addEventListener('change', function (e) {
  var v = e.target.value;
  document.querySelectorAll('section.step').forEach(function (s) {
    s.hidden = v !== 'all' && s.dataset.step !== v;
  });
});
"""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _signed(x: float) -> str:
    return f"{x:+.3f}"


def reward_class(reward: float, scale: float) -> str:
    """The CSS class of a token's reward: ``zero``, or ``neg1..negL`` / ``pos1..posL`` by |reward| / scale."""
    if abs(reward) <= ZERO or scale <= 0:
        return "zero"
    level = min(LEVELS, max(1, math.ceil(abs(reward) / scale * LEVELS)))
    return f"{'neg' if reward < 0 else 'pos'}{level}"


def _level_css() -> str:
    rules = []
    for level in range(1, LEVELS + 1):
        alpha = 0.15 + 0.75 * (level - 1) / (LEVELS - 1)
        ink = "color:#fff;" if level >= 4 else ""
        for name, (r, g, b) in (("neg", _RED), ("pos", _GREEN)):
            rules.append(f".{name}{level}{{background:rgba({r},{g},{b},{alpha:.2f});{ink}}}")
    for i, colour in enumerate(_LABEL_COLOURS[:len(LABELS)]):
        rules.append(f".lab-{i}{{background:{colour}}}")
        rules.append(f".u-{i}{{box-shadow:inset 0 -2px 0 {colour}}}")   # under a statement's tokens
    return "\n".join(rules)


def _label_class(label: str) -> str:
    return f"lab-{LABELS.index(label)}" if label in LABELS else "lab-x"


def _label_badge(label: str) -> str:
    return f'<span class="lab {_label_class(label)}">{_esc(label)}</span>'


def _statements_over(sample: Sample, a: int, b: int) -> list[dict]:
    """The statements whose span overlaps ``[a, b)`` (an empty span: the one that holds it)."""
    out = []
    for st in sample.statements or []:
        if st["start"] is None:
            continue
        if (a < st["end"] and b > st["start"]) if b > a else (st["start"] <= a < st["end"]):
            out.append(st)
    return out


def render_tokens(sample: Sample, scale: float) -> str:
    """The response as spans, one per token (tokens that share a character are merged), coloured by reward."""
    if sample.token_offsets is None:
        return _esc(sample.response)
    text, parts, pos = sample.response, [], 0
    offsets, rewards = sample.token_offsets, sample.token_rewards or []
    i = 0
    while i < len(offsets):
        a, b = offsets[i]
        reward, j = rewards[i], i + 1
        while j < len(offsets) and offsets[j] == (a, b) and b > a:   # a multi-byte character's tokens
            reward += rewards[j]
            j += 1
        if a > pos:                                                  # text no token covers (should not happen)
            parts.append(_esc(text[pos:a]))
        over = _statements_over(sample, a, b)
        tip = f"reward {_signed(reward)}" + (f" ({j - i} tokens)" if j - i > 1 else "")
        for st in over[:2]:
            p = "" if st["p"] is None else f", p {st['p']:.2f}"
            tip += f"\n{st['label']}{p}: {st['text'][:80]}"
        cls = reward_class(reward, scale) + (f" u-{LABELS.index(over[0]['label'])}"
                                             if over and over[0]["label"] in LABELS else "")
        if b > a:   # (overlapping spans, which engines do not send, would repeat text: each character once)
            parts.append(f'<span class="t {cls}" title="{_esc(tip)}">{_esc(text[max(a, pos):b])}</span>')
        else:
            parts.append(f'<span class="t special {cls}" title="{_esc("special token (EOS), " + tip)}">eos</span>')
        pos = max(pos, b)
        i = j
    if pos < len(text):
        parts.append(_esc(text[pos:]))
    return "".join(parts)


def render_statements(sample: Sample) -> str:
    if sample.statements is None:
        return ('<p class="note">No statements in this record: the run\'s reward function returned no '
                'verification (or the run predates per-statement logging).</p>')
    if not sample.statements:
        return f'<p class="note">No statements{" (the response abstains)" if sample.abstained else ""}.</p>'
    items = []
    for st in sample.statements:
        p = "" if st["p"] is None else f'<span class="p" title="the verifier\'s confidence in this label">' \
                                        f'p {st["p"]:.2f}</span>'
        info = "" if st.get("informativeness") is None else \
            f'<span class="info" title="informativeness 1-5">info {_esc(st["informativeness"])}</span>'
        unaligned = "" if st["aligned"] else \
            ' <span class="unaligned" title="its reward went to its whole sentence">(span not found)</span>'
        evidence = ""
        if st["evidence"]:
            quotes = "".join(f"<blockquote>{_esc(e)}</blockquote>" for e in st["evidence"])
            evidence = f'<details class="evidence"><summary>evidence ({len(st["evidence"])})</summary>{quotes}' \
                       f'</details>'
        items.append(f"<li>{_label_badge(st['label'])}{p}{info} {_esc(st['text'])}{unaligned}{evidence}</li>")
    return f'<ol class="st">{"".join(items)}</ol>'


def render_sample(sample: Sample, number: int, scale: float) -> str:
    meta = [f"#{number}", f"mode {_esc(sample.mode or '?')}",
            f'reward <b class="{"neg-r" if sample.score < 0 else "pos-r"}">{_signed(sample.score)}</b>']
    if sample.statements is not None:
        meta.append(f"{len(sample.statements)} statement{'s' if len(sample.statements) != 1 else ''}")
    if sample.abstained:
        meta.append("<b>abstained</b>")
    if sample.finish_reason == "length":
        meta.append("cut at the length limit")
    if sample.backend:
        meta.append(f"verifier {_esc(sample.backend)}")
    if sample.gold:
        meta.append(f"gold: {_esc(sample.gold)}")
    meta.append(f"line {sample.line}")
    passages = "".join(f'<div class="passage">{_esc(m)}</div>' for m in sample.materials) or \
        '<p class="note">no passages</p>'
    where = "in the prompt" if sample.mode == "evidence" else "given to the verifier only"
    prompt = (f'<details class="prompt"><summary>prompt and evidence ({len(sample.materials)} passage'
              f'{"s" if len(sample.materials) != 1 else ""}, {where})</summary>'
              f'<div>question: {_esc(sample.question)}</div>{passages}</details>')
    return (f'<article class="rollout"><div class="meta">{" · ".join(meta)}</div>'
            f'<div class="q">{_esc(sample.question)}</div>{prompt}'
            f'<div class="resp">{render_tokens(sample, scale)}</div>{render_statements(sample)}</article>')


def _label_counts(samples: Iterable[Sample]) -> Counter:
    counts: Counter = Counter()
    for s in samples:
        if s.statements is not None:
            counts.update(st["label"] for st in s.statements)
        else:
            counts.update(s.labels)
    return counts


def render_page(samples: list[Sample], source: str, total: Optional[int] = None) -> str:
    """The whole page for ``samples`` (in step order). ``source``: the file they came from; ``total``: how many
    records it holds (when more than are shown)."""
    steps = sorted({s.step for s in samples})
    rewards = [abs(r) for s in samples for r in (s.token_rewards or [])]
    scale = max(rewards, default=0.0)
    labels = _label_counts(samples)
    n_abstained = sum(s.abstained for s in samples)
    mean = sum(s.score for s in samples) / len(samples) if samples else 0.0
    backends = sorted({s.backend for s in samples if s.backend})
    shown = f"{len(samples)}" + (f" of {total}" if total is not None and total != len(samples) else "")
    label_text = " ".join(f"{_label_badge(lab)} {labels[lab]}" for lab in (*LABELS, *sorted(set(labels) - set(LABELS)))
                          if labels.get(lab)) or "none"
    summary = [f"<span><b>steps</b> {len(steps)}" + (f" ({steps[0]}–{steps[-1]})" if steps else "") + "</span>",
               f"<span><b>rollouts</b> {shown}</span>", f"<span><b>mean reward</b> {_signed(mean)}</span>",
               f"<span><b>abstained</b> {n_abstained}</span>", f"<span><b>statements</b> {label_text}</span>"]
    if backends:
        summary.append(f"<span><b>verifier</b> {_esc(', '.join(backends))}</span>")
    ticks = [-scale * k / LEVELS for k in range(LEVELS, 0, -1)] + [0.0] + [scale * k / LEVELS for k in range(1, LEVELS + 1)]
    scale_html = "".join(f'<span class="{reward_class(t, scale)}" title="reward {_signed(t)}">{t:+.2f}</span>'
                         for t in ticks)
    options = "".join(f'<option value="{st}">step {st}</option>' for st in steps)
    sections = []
    number = 0
    for st in steps:
        rows = [s for s in samples if s.step == st]
        step_mean = sum(s.score for s in rows) / len(rows)
        body = []
        for s in rows:
            number += 1
            body.append(render_sample(s, number, scale))
        sections.append(f'<section class="step" id="step-{st}" data-step="{st}"><h2>step {st} <small>'
                        f'{len(rows)} rollout{"s" if len(rows) != 1 else ""}, mean reward {_signed(step_mean)}'
                        f'</small></h2>{"".join(body)}</section>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>rlfh show: {_esc(source)}</title><style>{_CSS}{_level_css()}</style></head><body>"
        f'<header><h1>What the verifier said</h1><p class="src">{_esc(source)}</p>'
        f'<div class="summary">{"".join(summary)}</div>'
        f'<div class="legend"><span>token reward:</span><span class="scale">{scale_html}</span>'
        f'<span>underline: the label of the token\'s statement · hover a token: its reward · p: the '
        f'verifier\'s confidence in the label</span>'
        f'<label>show <select id="step-select"><option value="all">all steps</option>{options}</select></label>'
        f"</div></header><main>{''.join(sections)}</main><script>{_JS}</script></body></html>\n")


def select(samples: list[Sample], step: Optional[int], limit: int, path: Path) -> list[Sample]:
    """The records to show: one step's (``step``), at most ``limit`` (0: all), the latest steps' kept."""
    if step is not None:
        chosen = [s for s in samples if s.step == step]
        if not chosen:
            steps = sorted({s.step for s in samples})
            raise SamplesError(f"{path}: no samples of step {step}; it has steps {_ranges(steps)}")
    else:
        chosen = samples
    chosen = sorted(chosen, key=lambda s: (s.step, s.line))
    return chosen[-limit:] if limit else chosen


def _ranges(steps: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3, 5'."""
    out, i = [], 0
    while i < len(steps):
        j = i
        while j + 1 < len(steps) and steps[j + 1] == steps[j] + 1:
            j += 1
        out.append(str(steps[i]) if i == j else f"{steps[i]}-{steps[j]}")
        i = j + 1
    return ", ".join(out)


def build(run: str | Path, out: Optional[str | Path] = None, step: Optional[int] = None,
          limit: int = DEFAULT_LIMIT) -> tuple[Path, int, int]:
    """Write the page of RUN; returns ``(page path, rollouts shown, records in the file)``."""
    path = samples_path(run)
    samples = read_samples(path)
    chosen = select(samples, step, limit, path)
    page = Path(out) if out else path.with_suffix(".html")
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render_page(chosen, str(path), total=len(samples)), encoding="utf-8")
    return page, len(chosen), len(samples)


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative; give 0 or more")
    return n


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="Render a run's samples.jsonl as an HTML page: tokens coloured by reward, "
                                    "statements with labels and p.",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN",
                   help="A run's output folder (SAVE_PATH of `rlfh train`, which holds samples.jsonl) or the path of "
                        "a samples.jsonl.")
    p.add_argument("--out", metavar="FILE", default=None,
                   help="Where to write the page. Default: samples.html next to the samples.jsonl (RUN/samples.html).")
    p.add_argument("--step", metavar="N", type=int, default=None,
                   help="Show only training step N (an error names the steps the file has). Default: every step.")
    p.add_argument("--limit", metavar="N", type=_non_negative, default=DEFAULT_LIMIT,
                   help=f"At most N rollouts on the page, the latest steps' (with --step: that step's last N). "
                        f"0: all of them. Default {DEFAULT_LIMIT}.")
    p.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    try:
        page, shown, total = build(args.run, args.out, args.step, args.limit)
    except SamplesError as e:
        print(f"rlfh show: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"rlfh show: cannot write the page: {e}", file=sys.stderr)
        return 2
    more = f" of {total}" if shown != total else ""
    print(f"wrote {page} ({shown}{more} rollouts); open file://{page.resolve()} in a browser")
    return 0
