"""What the quantifier tests' records mean in words (``nbutils.stats.claim``), shared by the monotonicity study and
the custom study's concept-learning part, so both say the same thing for the same test."""
from __future__ import annotations

from ...stats import claim

CONDITION_WORDS = {"concept_learning": "under concept learning", "explicit": "with the concept stated"}

UP = "upward concepts were learned better than downward ones"
DOWN = "downward concepts were learned better than upward ones"
DIFFER = "upward and downward concepts are learned differently"


def _in(condition) -> str:
    return f" {CONDITION_WORDS.get(condition, f'in condition {condition}')}" if isinstance(condition, str) else ""


def gap(condition=None, scale: str = "log_odds_ratio", symbol: str | None = None) -> dict:
    """The upward vs downward gap (log odds ratio, or accuracy difference in points): above 0, upward is better.
    With the concept stated nothing is learned: the words say "answered"."""
    if condition == "explicit":
        return claim(f"the upward vs downward gap{_in(condition)}", UP.replace("learned", "answered"),
                     DOWN.replace("learned", "answered"), DIFFER.replace("learned", "answered"), scale=scale,
                     symbol=symbol)
    return claim(f"the upward vs downward gap{_in(condition)}", UP, DOWN, DIFFER, scale=scale, symbol=symbol)


def term(name, condition=None) -> dict:
    """A mixed model's coefficient, by its term: the gap, the change of the gap when the concept is stated, or the
    effect of stating the concept on downward concepts."""
    if name == "upward:explicit":
        return claim("the change of the upward vs downward gap when the concept is stated",
                     "stating the concept widened the gap (upward concepts gained more)",
                     "stating the concept narrowed the gap (downward concepts gained more)",
                     "stating the concept changes the gap", scale="log_odds_ratio")
    if name == "explicit":
        return claim("downward concepts with the concept stated vs learned",
                     "downward concepts were answered better with the concept stated",
                     "downward concepts were answered worse with the concept stated",
                     "stating the concept changes accuracy on downward concepts", scale="log_odds_ratio")
    return gap(condition)


def gap_difference() -> dict:
    """Concept-learning minus explicit log odds ratio: above 0, stating the concept shrinks the gap."""
    return claim("the gap under concept learning minus the gap with the concept stated",
                 "stating the concept narrowed the gap", "stating the concept widened the gap",
                 "stating the concept changes the gap", scale="log_odds_ratio", symbol="ratio of ORs")


def homogeneity() -> dict:
    """Breslow–Day: does the odds ratio differ between thresholds (no direction)."""
    return claim("whether the gap's odds ratio is the same at every threshold", "", "",
                 "the gap's odds ratio differs between thresholds", sided="none", symbol="")


def threshold_gap(term_name) -> dict:
    """The accuracy gap at one threshold, in points."""
    at = str(term_name).split("@", 1)[-1]
    return claim(f"the upward − downward accuracy gap at threshold {at}", UP + f" at {at}", DOWN + f" at {at}",
                 DIFFER + f" at {at}", scale="points", symbol="gap")


def explicit_vs_learned(term_name) -> dict:
    """Explicit minus concept-learning accuracy on the same prompts of one concept, in points."""
    concept = str(term_name).split("@", 1)[-1]
    return claim(f"accuracy on {concept!r} with the concept stated minus learned",
                 f"{concept!r} was answered better with the concept stated",
                 f"{concept!r} was answered worse with the concept stated",
                 f"stating the concept changes accuracy on {concept!r}", scale="points")


def accuracy_vs_chance(what: str, chance: float = 0.5) -> dict:
    """Accuracy against chance (two-sided binomial): above or below chance, as the data say."""
    was = "were" if what.startswith("all ") else "was"
    return claim(f"accuracy on {what} against chance, {100 * chance:.0f}%", f"{what} {was} answered above chance",
                 f"{what} {was} answered below chance", f"accuracy on {what} differs from chance",
                 scale="proportion", null=chance)


def dprime_gap() -> dict:
    """Upward minus downward d′ over matched thresholds."""
    return claim("the upward − downward d′ gap", "upward concepts were discriminated better (d′)",
                 "downward concepts were discriminated better (d′)", "upward and downward d′ differ", symbol="d′ gap")
