"""Word lists that both the verifier and the gold grader read: names of one country and its people.

Pure data and one lookup (no imports beyond the standard library), so ``core.grader`` and
``verifier_service.evidence`` share one list instead of keeping two.
"""
from __future__ import annotations

# Names of one country and its people: a claim that says "UK" is supported by a passage that says "Britain's", and
# "from South Korea" answers a question whose gold answer is "South Korean".
COUNTRY_ALIASES: tuple[frozenset, ...] = tuple(frozenset(g) for g in (
    ("uk", "united kingdom", "britain", "great britain", "british"),
    ("us", "usa", "united states", "united states of america", "america", "american"),
    ("south korea", "south korean", "korea", "korean"), ("north korea", "north korean"),
    ("england", "english"), ("scotland", "scottish"), ("wales", "welsh"), ("ireland", "irish"),
    ("france", "french"), ("germany", "german"), ("italy", "italian"), ("spain", "spanish"),
    ("japan", "japanese"), ("china", "chinese"), ("india", "indian"), ("canada", "canadian"),
    ("australia", "australian"), ("brazil", "brazilian"), ("mexico", "mexican"), ("russia", "russian"),
    ("netherlands", "dutch"), ("sweden", "swedish"), ("norway", "norwegian"), ("finland", "finnish"),
    ("pakistan", "pakistani"), ("colombia", "colombian"), ("austria", "austrian"), ("switzerland", "swiss"),
))
_ALIAS_OF = {name: group for group in COUNTRY_ALIASES for name in group}


def country_aliases_of(normalized: str) -> list[str]:
    """The other names of the country a normalised phrase names ("south korean" -> "korea", "south korea", ...);
    empty when it names none."""
    group = _ALIAS_OF.get(normalized)
    return sorted(group - {normalized}) if group else []
