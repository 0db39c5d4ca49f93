"""Per-request evidence index: materials split into sentences, BM25 (``bm25s``) over their stems,
plus the lookup sets (stems, numbers, normalised text) used for agreement checks.

Built once per request; for the typical 2-3 HaluEval passages it costs well under 1 ms.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property

from verifier_service import text as T


_BM25 = None


def _bm25():
    """Import bm25s once; it sets its own logger to DEBUG on import, which we turn back down."""
    global _BM25
    if _BM25 is None:
        import bm25s
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        _BM25 = bm25s
    return _BM25


@dataclass
class EvidenceSentence:
    text: str
    passage: int
    stems: list[str]
    words: list[str] = field(default_factory=list)  # lower-cased surface words, in order
    nwords: list[str] = field(default_factory=list)  # normalised words (articles dropped, 's stripped)
    nstems: list[str] = field(default_factory=list)  # stem of each normalised word


class MaterialIndex:
    """Sentences of the materials with a BM25 index and agreement lookups."""

    def __init__(self, materials: list[str]):
        self.materials = [m for m in materials if m and m.strip()]
        self.sents: list[EvidenceSentence] = []
        for pi, passage in enumerate(self.materials):
            for sp in T.split_sentences(passage):
                nw = T.normalize(sp.text).split()
                self.sents.append(EvidenceSentence(sp.text, pi, T.content_words(sp.text), T.words(sp.text),
                                                   nw, [T.stem(w) for w in nw]))
        self.vocab: set[str] = {s for es in self.sents for s in es.stems}
        self.word_set: set[str] = {w for es in self.sents for w in es.words}
        joined = "\n".join(self.materials)
        self.norm_text = " " + T.normalize(joined) + " "
        self.numbers: set[str] = T.numbers(joined)
        self._bm25 = None
        if any(es.stems for es in self.sents):
            self._bm25 = _bm25().BM25()
            self._bm25.index([es.stems or ["\x00"] for es in self.sents], show_progress=False)

    def __len__(self) -> int:
        return len(self.sents)

    def search(self, query_stems: list[str], k: int = 3) -> list[tuple[int, float]]:
        """Top-``k`` (sentence index, BM25 score) for a stemmed query; score > 0 only."""
        if self._bm25 is None or not query_stems:
            return []
        q = [s for s in query_stems if s in self.vocab]
        if not q:
            return []
        scores = self._bm25.get_scores(q)
        order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))[:k]
        return [(i, float(scores[i])) for i in order if scores[i] > 0]

    def scores(self, query_stems: list[str]) -> list[float]:
        """BM25 score of every sentence for a stemmed query (zeros when nothing matches)."""
        q = [s for s in query_stems if s in self.vocab]
        if self._bm25 is None or not q:
            return [0.0] * len(self.sents)
        return [float(x) for x in self._bm25.get_scores(q)]

    def has_phrase(self, text: str) -> bool:
        """The normalised ``text`` occurs as a whole-word phrase in the materials."""
        n = T.normalize(text)
        return bool(n) and f" {n} " in self.norm_text

    def phrase_support(self, text: str, generic: frozenset = frozenset()) -> float:
        """1.0 for an exact phrase match; else the weighted share of its words found in the materials.

        Words in ``generic`` (e.g. "park", "river", "university") weigh 0.25: for a name, the distinctive
        words must be found ("Prospect Park" is not supported by a passage about Central Park).
        """
        if self.has_phrase(text):
            return 1.0
        ws = [w for w in T.normalize(text).split() if w not in T.STOPWORDS]
        if not ws:
            return 0.0
        tot = hit = 0.0
        for w in ws:
            wt = 0.25 if w in generic else 1.0
            tot += wt
            if w in self.word_set or T.stem(w) in self.vocab:
                hit += wt
        return hit / tot

    @cached_property
    def sentence_entities(self) -> list[list[T.Entity]]:
        return [T.entities(es.text) for es in self.sents]

    @cached_property
    def _positions(self) -> dict[str, list[tuple[int, int]]]:
        """Inverted index: normalised word -> [(sentence, position)]."""
        inv: dict[str, list[tuple[int, int]]] = {}
        for si, es in enumerate(self.sents):
            for j, w in enumerate(es.nwords):
                inv.setdefault(w, []).append((si, j))
        return inv

    def occurrences(self, text: str, fuzzy: bool = False) -> list[tuple[int, int, int]]:
        """(sentence index, word position, length in words) of each occurrence of ``text``.

        Exact whole-phrase matches; with ``fuzzy``, a multi-word name also matches its first and last
        word within 4 words of each other ("Oleg Menshikov" in "Oleg Evgenyevich Menshikov").
        """
        target = T.normalize(text).split()
        if not target:
            return []
        n = len(target)
        out = []
        for si, j in self._positions.get(target[0], ()):
            if self.sents[si].nwords[j:j + n] == target:
                out.append((si, j, n))
        if not out and fuzzy and n >= 2:
            last = target[-1]
            for si, j in self._positions.get(target[0], ()):
                nw = self.sents[si].nwords
                for k in range(j + 1, min(len(nw), j + n + 3)):
                    if nw[k] == last:
                        out.append((si, j, k - j + 1))
                        break
        return out
