"""Binary surface features per instance, as the ICQ seed (004) defines them: words, negation, sentiment, overlap with
the premise, typos, length, numbers; tense and named entities when spaCy's ``en_core_web_sm`` is installed; and the
structural cues of the monotonicity study's few-shot prompts (last example's label, majority label of the nearest examples, the
query's noun).

Every feature is a column of booleans named ``kind:value`` (``word:never``, ``NEGATION``, ``SENTIMENT:negative``) so
cue discovery treats all kinds alike. Sentiment is VADER's compound score (a lexicon that ships with its package);
typos are words pyspellchecker's English dictionary does not know; negation is a word list (the paper used a
dependency parse, which needs a tagger that cannot be installed offline).
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

# NLTK's English stop-word list (179 words; nltk.corpus.stopwords needs a corpus download, so it is spelled here)
STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his himself
she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that
that'll these those am is are was were be been being have has had having do does did doing a an the and but if or
because as until while of at by for with about against between into through during before after above below to from
up down in out on off over under again further then once here there when where why how all any both each few more
most other some such no nor not only own same so than too very s t can will just don don't should should've now d
ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn
isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won
won't wouldn wouldn't
""".split())
NEGATION_WORDS = frozenset("""no not never nothing nobody none neither nor nowhere cannot without n't
don't doesn't didn't isn't aren't wasn't weren't won't wouldn't can't couldn't shouldn't hasn't haven't hadn't""".split())
SENTIMENT_THRESHOLD = 0.05  # VADER's own convention: compound ≥ 0.05 positive, ≤ −0.05 negative
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
SPACY_MODEL = "en_core_web_sm"
SPACY_NOTE = (f"tense and named-entity features skipped: they need spaCy and its {SPACY_MODEL} model "
              f"(pip install spacy && python -m spacy download {SPACY_MODEL})")

# the monotonicity study's example lines: "There are T N. Alice has C of the T N. Does Alice have <phrase> of the N? Yes."
FEW_SHOT_LINE = re.compile(r"^There are (\d+) (.+?)\. \w+ has (\d+) of the \1 \2\. Does \w+ have .+ of the \2\?"
                           r"(?: (Yes|No)\.)?\s*$")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters with an optional apostrophe suffix: ``don't``, ``alice's``)."""
    return WORD.findall(str(text).lower())


@lru_cache(maxsize=1)
def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


@lru_cache(maxsize=1)
def _speller():
    from spellchecker import SpellChecker

    return SpellChecker(language="en")


@lru_cache(maxsize=200_000)
def _is_typo(word: str) -> bool:
    return len(word) > 1 and "'" not in word and not _speller().known([word])


def sentiment(text: str) -> float:
    """VADER's compound sentiment score in [−1, 1]."""
    return float(_vader().polarity_scores(str(text))["compound"])


def spacy_pipeline():
    """spaCy's small English pipeline when the user has installed it, else None (see ``SPACY_NOTE``)."""
    try:
        import spacy

        return spacy.load(SPACY_MODEL)
    except (ImportError, OSError):
        return None


def _tense(doc) -> str | None:
    """past / present / future of the first sentence's root verb (Penn tags; ``will``/``shall`` make future)."""
    for sent in doc.sents:
        root = sent.root
        aux = {c.lower_ for c in root.children if c.dep_ in ("aux", "auxpass")}
        if aux & {"will", "shall", "'ll"}:
            return "future"
        tags = {root.tag_} | {c.tag_ for c in root.children if c.dep_ in ("aux", "auxpass")}
        if tags & {"VBD", "VBN"} and not tags & {"VBP", "VBZ"}:
            return "past"
        if root.pos_ in ("VERB", "AUX"):
            return "present"
        return None
    return None


def text_features(texts: pd.Series, premises: pd.Series | None = None, bigrams: bool = False,
                  nlp=None) -> pd.DataFrame:
    """The paper's linguistic features of each text (one row per text, boolean columns ``kind:value``).

    ``premises`` (same index) adds ``OVERLAP``: a non-stop word shared by premise and text. ``nlp`` (a spaCy
    pipeline) adds ``TENSE:*`` and ``NER:*``. Length is split at the dataset's tertiles of the word count.
    """
    texts = texts.astype(str)
    uniq = pd.unique(texts)
    cols: dict[str, dict[str, bool]] = {}
    per_text: dict[str, dict[str, bool]] = {}
    for t in uniq:
        toks = words(t)
        f = {f"word:{w}": True for w in set(toks)}
        if bigrams:
            f.update({f"bigram:{a} {b}": True for a, b in zip(toks, toks[1:])})
        f["NEGATION"] = any(w in NEGATION_WORDS for w in toks)
        s = sentiment(t)
        f["SENTIMENT:positive"] = s >= SENTIMENT_THRESHOLD
        f["SENTIMENT:negative"] = s <= -SENTIMENT_THRESHOLD
        f["TYPO"] = any(_is_typo(w) for w in set(toks))
        f["NUMBER"] = bool(NUMBER.search(t))
        if nlp is not None:
            doc = nlp(t)
            tense = _tense(doc)
            if tense:
                f[f"TENSE:{tense}"] = True
            f.update({f"NER:{e.label_}": True for e in doc.ents})
        per_text[t] = f
    for t, f in per_text.items():
        for k, v in f.items():
            if v:
                cols.setdefault(k, {})[t] = True
    out = pd.DataFrame({k: texts.map(v).fillna(False).astype(bool) for k, v in cols.items()}, index=texts.index)
    n_words = texts.map(lambda t: len(words(t)))
    lo, hi = np.quantile(n_words, [1 / 3, 2 / 3]) if len(n_words) else (0, 0)
    if hi > lo:
        out["LENGTH:short"] = n_words <= lo
        out["LENGTH:long"] = n_words >= hi
    if premises is not None:
        out["OVERLAP"] = [bool((set(words(p)) - STOP_WORDS) & (set(words(h)) - STOP_WORDS))
                          for p, h in zip(premises.astype(str), texts)]
    return out


def parse_few_shot(text: str) -> tuple[list[tuple[int, int, str, bool]], tuple[int, int, str]] | None:
    """The monotonicity study's prompt as ([(total, count, noun, label) per example], (total, count, noun) of the query), or None
    when the text is not in that format (every line an example, the last one unanswered)."""
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    parsed = [FEW_SHOT_LINE.match(ln.strip()) for ln in lines]
    if not all(parsed) or parsed[-1].group(4) is not None or any(m.group(4) is None for m in parsed[:-1]):
        return None
    examples = [(int(m.group(1)), int(m.group(3)), m.group(2), m.group(4) == "Yes") for m in parsed[:-1]]
    q = parsed[-1]
    return examples, (int(q.group(1)), int(q.group(3)), q.group(2))


def few_shot_features(texts: pd.Series, nearest_k: int = 5) -> pd.DataFrame | None:
    """Structural cues of monotonicity-style prompts: ``LAST_LABEL:Yes|No`` (the last example's answer),
    ``NEAREST_MAJORITY:Yes|No|tie`` (majority answer of the ``nearest_k`` examples closest to the query in count/total;
    ties in distance broken by position, the later example first) and ``QUERY_NOUN:<noun>``. None when any text is
    not in the format."""
    if isinstance(nearest_k, bool) or not isinstance(nearest_k, (int, np.integer)) or nearest_k < 1:
        raise ValueError(f"nearest_k: must be a positive integer, got {nearest_k!r}")
    rows = []
    for t in texts.astype(str):
        p = parse_few_shot(t)
        if p is None:
            return None
        examples, (qt, qc, noun) = p
        ratio = qc / qt
        dist = np.array([abs(c / tot - ratio) for tot, c, _, _ in examples])
        order = np.lexsort((-np.arange(len(examples)), dist))[:nearest_k]
        yes = sum(examples[i][3] for i in order)
        no = len(order) - yes
        rows.append({"last": "Yes" if examples[-1][3] else "No",
                     "nearest": "Yes" if yes > no else "No" if no > yes else "tie", "noun": noun})
    p = pd.DataFrame(rows, index=texts.index)
    parts = [pd.get_dummies(p["last"], prefix="LAST_LABEL", prefix_sep=":"),
             pd.get_dummies(p["nearest"], prefix="NEAREST_MAJORITY", prefix_sep=":"),
             pd.get_dummies(p["noun"], prefix="QUERY_NOUN", prefix_sep=":")]
    return pd.concat(parts, axis=1).astype(bool)
