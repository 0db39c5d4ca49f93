"""One line of SAVE_PATH/samples.jsonl: what the policy said at a step, and what the verifier made of it.

The run log (:meth:`cluster.run_log.RunLog.write_samples`) writes :func:`sample_record` for the first LOG_SAMPLES
responses of each step; ``rlfh show`` (:mod:`ops.show`) reads them back with :func:`read_samples` and renders
the page. Both sides live here, so the record has one definition.

A record (keys in this order; the first eight are what runs wrote before the per-token fields were added, and a
reader accepts records that have only those)::

    step, question, mode ("closed" | "evidence"), gold, response, score, abstained, labels {label: count}
    materials        [str]            the prompt's passages (shown folded on the page)
    finish_reason    "stop" | "length"
    token_offsets    [[start, end]]   each response token's character span in ``response`` (empty: EOS)
    token_rewards    [float]          the verifier's reward on each token, same length
    backend          str              the verifier backend that labelled it (when the reward function said)
    statements       [{text, start, end, label, p, informativeness, aligned, evidence}]
                     the verifier's statements; ``p`` is the statement's ``confidence``, how sure the verifier
                     is of the label (the claim judge: its probability of that label, so P(supported) for a
                     Correct one). Absent when the reward function returned no verification.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

#: The keys every record has, old and new.
BASE_KEYS = ("step", "question", "mode", "gold", "response", "score", "abstained", "labels")
#: Evidence snippets kept per statement, and characters per snippet: enough to see why, small enough to log.
MAX_EVIDENCE = 3
MAX_EVIDENCE_CHARS = 400


def sample_record(step: int, prompt: Any, mode: str, sample: Any, result: Any) -> dict[str, Any]:
    """The samples.jsonl record of one response.

    Args:
        step: the training step.
        prompt: the prompt's item (``question``, ``knowledge``, ``right_answer``: a :class:`core.data.QAItem`).
        mode: "closed" or "evidence".
        sample: the response (``response_text``, ``token_offsets``, ``finish_reason``: an
            :class:`actors.types.RolloutSample`).
        result: its reward (the fields of :class:`reward_service.schemas.ItemReward`; ``verification`` may be
            None, and then no statements are logged).
    """
    rec: dict[str, Any] = {"step": step, "question": prompt.question, "mode": mode, "gold": prompt.right_answer,
                           "response": sample.response_text, "score": round(float(result.score), 4),
                           "abstained": bool(result.abstained), "labels": dict(result.label_counts)}
    rec["materials"] = list(getattr(prompt, "knowledge", None) or [])
    rec["finish_reason"] = getattr(sample, "finish_reason", None)
    rec["token_offsets"] = [[int(a), int(b)] for a, b in sample.token_offsets]
    rec["token_rewards"] = [round(float(x), 4) for x in result.token_rewards]
    verification = getattr(result, "verification", None)
    if verification is not None:
        rec["backend"] = verification.backend
        rec["statements"] = [
            {"text": st.text, "start": st.start, "end": st.end, "label": st.label, "p": round(float(st.confidence), 4),
             "informativeness": st.informativeness, "aligned": st.aligned,
             "evidence": [e[:MAX_EVIDENCE_CHARS] for e in st.evidence[:MAX_EVIDENCE]]}
            for sent in verification.sentences for st in sent.statements]
    return rec


# --------------------------------------------------------------------------------------
# reading them back
# --------------------------------------------------------------------------------------

class SamplesError(ValueError):
    """samples.jsonl cannot be read: the message names the file, the line and what is wrong."""


@dataclass
class Sample:
    """One record of samples.jsonl, checked. ``line`` is its 1-based line number in the file."""

    line: int
    step: int
    question: str
    mode: str
    gold: Optional[str]
    response: str
    score: float
    abstained: bool
    labels: dict[str, int]
    materials: list[str]
    finish_reason: Optional[str]
    token_offsets: Optional[list[tuple[int, int]]]   # None: an older record without per-token rewards
    token_rewards: Optional[list[float]]
    backend: Optional[str]
    statements: Optional[list[dict[str, Any]]]       # None: no verification was logged


def samples_path(run: str | Path) -> Path:
    """RUN (a run's SAVE_PATH, or a samples.jsonl itself) -> the samples.jsonl to read."""
    p = Path(run)
    if p.is_dir():
        p = p / "samples.jsonl"
        if not p.exists():
            raise SamplesError(f"{p}: no such file; {run} has no samples.jsonl. Is it a run's SAVE_PATH? "
                               "(a run with LOG_SAMPLES=0 writes none)")
        return p
    if not p.exists():
        raise SamplesError(f"{p}: no such file or folder; give a run's SAVE_PATH or the path of its samples.jsonl")
    return p


def read_samples(path: str | Path) -> list[Sample]:
    """Every record of ``path`` (a samples.jsonl), checked; raises :class:`SamplesError` naming the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SamplesError(f"{path}: not UTF-8 text ({e}); is it a samples.jsonl?") from None
    except OSError as e:
        raise SamplesError(f"{path}: cannot be read ({e.strerror or e})") from None
    out: list[Sample] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SamplesError(f"{path} line {n}: not JSON ({e.msg} at column {e.colno}); each line of "
                               "samples.jsonl is one JSON object") from None
        out.append(_check(rec, path, n))
    if not out:
        raise SamplesError(f"{path}: empty, no samples to show (the run has not finished a step yet, or it ran "
                           "with LOG_SAMPLES=0)")
    return out


def _check(rec: Any, path: Path, n: int) -> Sample:
    where = f"{path} line {n}"
    if not isinstance(rec, dict):
        raise SamplesError(f"{where}: a JSON {type(rec).__name__}, not an object with {', '.join(BASE_KEYS)}")
    missing = [k for k in ("step", "question", "response") if k not in rec]
    if missing:
        raise SamplesError(f"{where}: no {', '.join(repr(k) for k in missing)} field; is this a run's "
                           "samples.jsonl?")

    def typed(key: str, types: tuple, default: Any = None, what: str = "") -> Any:
        v = rec.get(key, default)
        if v is None and key not in ("step", "question", "response"):
            return default
        if isinstance(v, bool) and bool not in types:
            v = object()   # true/false is not a number here
        if not isinstance(v, types):
            raise SamplesError(f"{where}: {key!r} must be {what}, got {json.dumps(rec.get(key))[:80]}")
        return v

    step = typed("step", (int,), what="an integer")
    question = typed("question", (str,), what="a string")
    response = typed("response", (str,), what="a string")
    score = float(typed("score", (int, float), 0.0, "a number"))
    labels = typed("labels", (dict,), {}, "an object {label: count}")
    materials = typed("materials", (list,), [], "a list of strings")
    if not all(isinstance(m, str) for m in materials):
        raise SamplesError(f"{where}: 'materials' must be a list of strings")
    offsets, rewards = rec.get("token_offsets"), rec.get("token_rewards")
    if (offsets is None) != (rewards is None):
        raise SamplesError(f"{where}: has {'token_offsets' if rewards is None else 'token_rewards'} without "
                           f"{'token_rewards' if rewards is None else 'token_offsets'}; both or neither")
    if offsets is not None:
        offsets = _offsets(offsets, len(response), where)
        if not isinstance(rewards, list) or not all(_is_number(r) for r in rewards):
            raise SamplesError(f"{where}: 'token_rewards' must be a list of finite numbers")
        if len(rewards) != len(offsets):
            raise SamplesError(f"{where}: {len(rewards)} token_rewards for {len(offsets)} token_offsets; "
                               "one reward per token")
        rewards = [float(r) for r in rewards]
    statements = rec.get("statements")
    if statements is not None:
        statements = _statements(statements, len(response), where)
    return Sample(line=n, step=step, question=question, mode=str(rec.get("mode") or ""),
                  gold=rec.get("gold") if isinstance(rec.get("gold"), str) else None, response=response,
                  score=score, abstained=bool(rec.get("abstained", False)),
                  labels={str(k): int(v) for k, v in labels.items() if _is_number(v)}, materials=materials,
                  finish_reason=rec.get("finish_reason") if isinstance(rec.get("finish_reason"), str) else None,
                  token_offsets=offsets, token_rewards=rewards,
                  backend=rec.get("backend") if isinstance(rec.get("backend"), str) else None, statements=statements)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _offsets(offsets: Any, text_len: int, where: str) -> list[tuple[int, int]]:
    if not isinstance(offsets, list):
        raise SamplesError(f"{where}: 'token_offsets' must be a list of [start, end] pairs")
    out = []
    for i, pair in enumerate(offsets):
        if (not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                    for x in pair)):
            raise SamplesError(f"{where}: token_offsets[{i}] must be [start, end] (integers), got "
                               f"{json.dumps(pair)[:40]}")
        a, b = pair
        if not 0 <= a <= b <= text_len:
            raise SamplesError(f"{where}: token_offsets[{i}] = [{a}, {b}] is not a span of the "
                               f"{text_len}-character response")
        out.append((a, b))
    return out


def _statements(statements: Any, text_len: int, where: str) -> list[dict[str, Any]]:
    if not isinstance(statements, list):
        raise SamplesError(f"{where}: 'statements' must be a list of objects")
    out = []
    for i, st in enumerate(statements):
        if not isinstance(st, dict) or not isinstance(st.get("text"), str) or not isinstance(st.get("label"), str):
            raise SamplesError(f"{where}: statements[{i}] must be an object with a 'text' and a 'label'")
        p = st.get("p")
        if p is not None and not _is_number(p):
            raise SamplesError(f"{where}: statements[{i}].p must be a number, got {json.dumps(p)[:40]}")
        start, end = st.get("start"), st.get("end")
        span_ok = (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= text_len)
        evidence = st.get("evidence") or []
        out.append({"text": st["text"], "label": st["label"], "p": None if p is None else float(p),
                    "informativeness": st.get("informativeness"), "aligned": st.get("aligned", True) is not False,
                    "start": start if span_ok else None, "end": end if span_ok else None,
                    "evidence": [e for e in evidence if isinstance(e, str)] if isinstance(evidence, list) else []})
    return out
