"""Question analysis for the ``evidence`` backend (no gold answer needed): :func:`analyze_question` finds the
expected answer type (yes/no, choice between named options, person, location, date, number, work, organisation,
other), the head noun of "which/what X" questions, the options of "A or B" questions and a comparison direction
("first", "more"...), with the lexicons it reads.

Below both :mod:`verifier_service.text` (whose fact split keeps the options of an "A or B" question whole) and
:mod:`verifier_service.question` (the answer ranker, which re-exports all of this); it reads only words
(:mod:`verifier_service.words`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from verifier_service import words as T

# ----------------------------------------------------------------------------- lexicons

PERSON_HEADS = frozenset("""
person people man woman men women actor actress singer musician artist author writer director producer player
politician president coach poet composer rapper songwriter comedian footballer athlete king queen leader founder
scientist physicist screenwriter novelist journalist guitarist drummer frontman frontwoman member host designer
architect painter engineer businessman businesswoman entrepreneur chef model wrestler boxer manager governor
senator judge general officer lawyer philosopher mathematician economist historian inventor presenter dancer
vocalist bassist pianist quarterback pitcher jockey candidate brother sister son daughter father mother wife
husband child who whom whose emperor prince princess duke pope bishop monarch ruler chancellor minister
personality star celebrity broadcaster cartoonist illustrator photographer sculptor keyboardist conductor
tennis golfer cyclist swimmer skater driver racer astronaut explorer activist soldier commander admiral
""".split())
LOCATION_HEADS = frozenset("""
city town village country state county region province island river lake mountain place location area district
capital continent nation borough municipality suburb neighborhood neighbourhood street park territory peninsula
sea ocean valley site venue stadium arena airport where hometown birthplace headquarters metropolitan community
""".split())
DATE_HEADS = frozenset("year date day month century decade season era when birthday".split())
NUMBER_HEADS = frozenset("""
number population amount percentage count age capacity height length size many much distance total seats
episodes long old tall far high big
""".split())
WORK_HEADS = frozenset("""
film movie album song single book novel series show play game opera musical poem documentary sitcom episode
track record comic manga anime video program programme franchise painting artwork work title soundtrack
publication poster
""".split())
ORG_HEADS = frozenset("""
band group company team university college school club label organization organisation party network channel
station brand corporation firm agency airline league church museum publisher store restaurant hotel studio
manufacturer magazine newspaper retailer chain conglomerate institution institute foundation
""".split())

LOCATION_WORDS = frozenset("""
city town village county state province island islands river lake mountain mountains mount park street road
valley bay sea ocean district region borough kingdom republic empire peninsula beach falls canyon desert forest
square avenue heights hills gulf coast harbor harbour
""".split())
ORG_WORDS = frozenset("""
company inc corporation corp university college school records club fc party council association group band
institute foundation society airlines airways network channel studios entertainment press magazine league
orchestra academy bank hospital museum church team
""".split())
COUNTRIES = frozenset("""
afghanistan albania algeria argentina armenia australia austria bangladesh belgium bolivia brazil bulgaria
cambodia cameroon canada chile china colombia croatia cuba cyprus czech denmark ecuador egypt england estonia
ethiopia finland france georgia germany ghana greece guatemala haiti honduras hungary iceland india indonesia
iran iraq ireland israel italy jamaica japan jordan kenya korea latvia lebanon libya lithuania luxembourg
malaysia mexico monaco mongolia morocco nepal netherlands holland nigeria norway pakistan panama paraguay peru
philippines poland portugal romania russia scotland serbia singapore slovakia slovenia somalia spain sudan
sweden switzerland syria taiwan thailand tunisia turkey uganda ukraine uruguay venezuela vietnam wales yemen
zimbabwe america usa uk britain europe asia africa antarctica oceania
alabama alaska arizona arkansas california colorado connecticut delaware florida hawaii idaho illinois indiana
iowa kansas kentucky louisiana maine maryland massachusetts michigan minnesota mississippi missouri montana
nebraska nevada ohio oklahoma oregon pennsylvania tennessee texas utah vermont virginia washington wisconsin
wyoming london paris berlin tokyo moscow rome madrid chicago boston york angeles toronto sydney melbourne
""".split())
NATIONALITIES = frozenset("""
american british english scottish welsh irish canadian australian german french italian spanish portuguese
dutch belgian swiss austrian swedish norwegian danish finnish icelandic russian polish czech hungarian romanian
greek turkish israeli egyptian indian pakistani chinese japanese korean vietnamese thai filipino indonesian
mexican brazilian argentine argentinian chilean colombian peruvian cuban jamaican nigerian kenyan
south african new zealand ukrainian serbian croatian bulgarian soviet
""".split())
_MONTHS = frozenset(T.MONTHS)
_AUX = frozenset("is are was were do does did can could has have had will would should shall may might".split())
_WH = ("who", "whom", "whose", "what", "which", "when", "where", "why", "how")

_MIN_WORDS = frozenset("first earlier earliest older oldest before elder eldest fewer less least smaller smallest "
                       "shorter shortest lower lowest".split())
_MAX_WORDS = frozenset("later latest last younger youngest newer newest recent more most larger largest bigger "
                       "biggest longer longest taller tallest higher highest greater greatest heavier many".split())
_YEAR_ATTR = frozenset("first earlier earliest older oldest before elder eldest later latest last younger youngest "
                       "newer newest recent recently born founded formed established released created opened "
                       "started built published".split())


@dataclass
class QuestionInfo:
    text: str
    qtype: str                    # yesno | choice | person | location | date | number | work | org | other
    head: str = ""                # head noun of which/what questions (stemmed)
    options: list[str] = field(default_factory=list)
    stems: set[str] = field(default_factory=set)
    stem_list: list[str] = field(default_factory=list)
    norm: str = ""                # " normalised question "
    direction: str = ""           # "min" | "max" | ""
    year_compare: bool = False
    entities: list[str] = field(default_factory=list)

    def mentions(self, phrase: str) -> bool:
        n = T.normalize(phrase)
        return bool(n) and f" {n} " in self.norm


OCCUPATION_HEADS = frozenset("occupation profession job career field role trade vocation".split())


def _head_type(head: str) -> str:
    if head in OCCUPATION_HEADS:
        return "occupation"
    if head in PERSON_HEADS:
        return "person"
    if head in LOCATION_HEADS:
        return "location"
    if head in DATE_HEADS:
        return "date"
    if head in NUMBER_HEADS:
        return "number"
    if head in WORK_HEADS:
        return "work"
    if head in ORG_HEADS:
        return "org"
    return "other"


# measure words that make a number question after "how" ("how high"), but are adjectives after "what/which"
_HOW_WORDS = frozenset("many much old long tall far high big large".split())

_AUX = frozenset("is are was were did does do has have had can could will would".split())

_OPTION_SPLIT_RE = re.compile(r"\s*,?\s+or\s+", re.IGNORECASE)


_BETWEEN_RE = re.compile(r"\b(?:between|of)\s+(.{2,60}?)\s+and\s+(.{2,60}?)\s*,\s*(?:which|who)\b", re.IGNORECASE)


def _options(q: str) -> list[str]:
    """The two named options of an 'A or B' question ("Who is older, Ann Lee or Bob Ray?"; also
    "Between A and B, which one ...")."""
    body = q.strip().rstrip("?").strip()
    m2 = _BETWEEN_RE.search(body)
    if m2:
        return [m2.group(1).strip(), m2.group(2).strip()]
    ms = list(_OPTION_SPLIT_RE.finditer(body))
    if not ms:
        return []
    m = ms[-1]
    left, right = body[:m.start()], body[m.end():]
    right = right.strip().strip(",")
    if not right or len(right.split()) > 10:
        return []
    # left option: after the last comma, or the trailing entity of the left part
    if "," in left:
        a = left[left.rfind(",") + 1:].strip()
    else:
        ents = [e for e in T.entities(left) if e.end >= len(left.rstrip()) - 1]
        a = ents[-1].text if ents else ""
    if not a or len(a.split()) > 12:
        return []
    if a.lower().startswith(("the ", "a ")) and len(a.split()) > 6:
        return []
    return [a, right]


_PREPS = frozenset("in at on for from by of to with during under since after before about".split())
_VERBISH = frozenset("is was are were has had have did does do won wrote played became made served".split())


def _question_word(ws: list[str]) -> Optional[int]:
    """Position of the word that asks: a leading wh-word ("Who ...", "In which year ..."); else the last
    "what/which X" or "how many" (a mid-sentence "who"/"which is" is usually a relative pronoun:
    "the band member who got his debut as a singer for what band?")."""
    if ws[0] in _WH:
        return 0
    if len(ws) > 1 and ws[0] in _PREPS and ws[1] in _WH:
        return 1
    for i in range(len(ws) - 1, -1, -1):
        w = ws[i]
        nxt = ws[i + 1] if i + 1 < len(ws) else ""
        if w == "what" or (w == "which" and nxt not in _VERBISH) or (w == "how" and nxt in (
                "many", "much", "old", "long", "tall", "far", "high", "big", "large")):
            return i
        if w in ("when", "where", "whom") and i + 1 >= len(ws) - 1:
            return i
    return next((i for i, w in enumerate(ws) if w in _WH), None)


@lru_cache(maxsize=4096)
def analyze_question(q: str) -> QuestionInfo:
    """What ``q`` asks for: its answer type, head noun, options and comparison direction (a
    :class:`QuestionInfo`; cached, so callers must not change it).

    Read in order: a question without words is ``other``; a yes/no or "A or B" shape decides first
    (:func:`_yes_no_or_choice`); a question without a question word is typed by its last noun
    (:func:`_declarative_type`); else the question word and what follows it do (:func:`_wh_type`).
    """
    ws = T.words(q)
    stem_list = [s for s in T.content_words(q)]
    info = QuestionInfo(text=q, qtype="other", stems=set(stem_list), stem_list=stem_list,
                        norm=" " + T.normalize(q) + " ", entities=[e.text for e in T.entities(q)])
    if not ws:
        return info
    wset = set(ws)
    if wset & _MIN_WORDS:
        info.direction = "min"
    elif wset & _MAX_WORDS:
        info.direction = "max"
    info.year_compare = bool(wset & _YEAR_ATTR) and bool(info.direction)
    opts = _options(q)
    wh_pos = _question_word(ws)
    if _yes_no_or_choice(info, q, ws, opts, wh_pos):
        return info
    if wh_pos is None:
        _declarative_type(info, ws)
    else:
        _wh_type(info, ws, wh_pos, opts)
    return info


def _yes_no_or_choice(info: QuestionInfo, q: str, ws: list[str], opts: list[str], wh_pos: Optional[int]) -> bool:
    """Set ``info.qtype`` (and ``options``) when the question's shape decides it: a tag question ("A and B, are
    found in Australia?"), a question led by an auxiliary ("Is ...", "Are A or B ..."), or options with a
    comparison ("Which came first, A or B?"). Returns whether it did."""
    if wh_pos is None and re.search(r",\s*(?:are|is|was|were|do|does|did|have|has|can)\b[^,]*\?\s*$", q,
                                    re.IGNORECASE):
        info.qtype = "yesno"  # "Dicksonia and Hardenbergia, are found in Australia?"
        return True
    if ws[0] in _AUX and (wh_pos is None or wh_pos > 3):
        info.qtype = "choice" if opts and not {"both", "same"} & set(ws) else "yesno"
        info.options = opts if info.qtype == "choice" else []
        return True
    if opts and info.direction:
        info.qtype = "choice"
        info.options = opts
        return True
    return False


def _declarative_type(info: QuestionInfo, ws: list[str]) -> None:
    """A declarative question ("... is a film about a player for the NBA team?"): its last noun is the head."""
    tail = [w for w in ws[-4:] if w not in T.STOPWORDS]
    info.head = T.stem(tail[-1]) if tail else ""
    info.qtype = _head_type(info.head) if info.head else "other"
    if info.qtype == "other":
        info.qtype = "entity"


def _wh_type(info: QuestionInfo, ws: list[str], wh_pos: int, opts: list[str]) -> None:
    """Type from the question word ``ws[wh_pos]``: who -> person, when -> date, where -> location, how many /
    much / old... -> number; what / which -> the type of their head noun (:func:`_wh_head`), a choice when two
    short options name things of that kind, ``entity`` when the head says nothing."""
    wh = ws[wh_pos]
    nxt = ws[wh_pos + 1] if wh_pos + 1 < len(ws) else ""
    if wh in ("who", "whom", "whose"):
        info.qtype = "person"
        if opts:
            info.qtype, info.options = "choice", opts
        return
    if wh == "when":
        info.qtype = "date"
        return
    if wh == "where":
        info.qtype = "location"
        return
    if wh == "how":
        info.qtype = "number" if nxt in ("many", "much", "old", "long", "tall", "far", "high", "big", "large") \
            else "other"
        return
    head = _wh_head(ws, wh_pos)
    info.head = head
    info.qtype = _head_type(head)
    if opts and (info.direction or info.qtype in ("person", "org", "work", "location", "other")):
        if len(opts) == 2 and all(len(o.split()) <= 8 for o in opts):
            info.qtype, info.options = "choice", opts
            return
    if info.qtype == "other":
        info.qtype = "entity"


def _wh_head(ws: list[str], wh_pos: int) -> str:
    """The head noun of a what / which question: the first lexicon noun within the next 6 words, else the first
    plain word (stemmed), else ""."""
    window = ws[wh_pos + 1: wh_pos + 7]
    if window and window[0] in ("type", "types", "kind", "kinds", "sort", "form", "category") and \
            len(window) > 2 and window[1] == "of":
        window = window[2:]  # "what type of performances" -> head "performances"
    if len(window) >= 2 and window[1] in _AUX and window[0] not in T.STOPWORDS and not window[0].isdigit():
        window = window[:1]  # "What sport are both ... known for?": the noun right before the verb is the head
    for w in window:
        st = T.stem(w)
        if w in _HOW_WORDS or st in _HOW_WORDS:
            continue  # "which highly popular actor", "what high school": a number head only after "how"
        if _head_type(w) != "other" or _head_type(st) != "other":
            return w if _head_type(w) != "other" else st
    for w in window:
        if w not in T.STOPWORDS and not w.isdigit() and w not in NATIONALITIES:
            return T.stem(w)
    return ""
