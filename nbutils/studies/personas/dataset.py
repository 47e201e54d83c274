"""The paired persona × question dataset of the DIF paper: personas, null personas, questions, rendering.

Every persona (the baseline with none, 22 sociodemographic personas, ``n_null_personas`` random 10-letter strings
and as many irrelevant real words) sees exactly the same questions with the same options in the same order, so the
set of questions a model answers correctly can be compared persona by persona. The persona is the system message
(``template``, default ``"You are {persona}."``); the engine puts it in the chat template's system turn, prefixes
it to the user turn when the template refuses a system message, or to the prompt for base models. The model's
answer is the option letter with the highest log-probability.
"""
from __future__ import annotations

import json
import string
import zlib
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from ... import artifacts, paths
from ...spec import LETTERS
from ...spec import ChoiceItems
from ..common.prompt_files import read_table
from ..common.prompt_items import load_items
from ..common.quantifiers import nouns, render_line

DATASET_FILE = "personas.parquet"
DEFAULT_TEMPLATE = "You are {persona}."
INSTRUCTION = "Answer with the letter of the correct option."
KINDS = ("baseline", "real", "null_random", "null_word")
NULL_LENGTH = 10  # letters in a random null persona (the paper's)
BASELINE = "baseline"
QUESTION_TYPES = ("arithmetic", "quantifier", "syllogism")
COLUMNS = ["prompt_id", "question_id", "question_type", "persona_id", "persona", "persona_kind", "category", "system",
           "text", "question", "options", "answer", "scored", "gold", "n_options", "chance", "source", "seed"]


def _int(name: str, value, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name}: must be an integer ≥ {lo}, got {value!r}")
    if hi is not None and value > hi:
        raise ValueError(f"{name}: must be an integer from {lo} to {hi}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------- personas

@lru_cache(maxsize=1)
def _persona_file() -> pd.DataFrame:
    with resources.files(__package__).joinpath("data/personas.csv").open() as f:
        return pd.read_csv(f, dtype=str)


def load_personas() -> pd.DataFrame:
    """The 22 sociodemographic personas shipped with the module: persona_id, persona, category, source."""
    return _persona_file().copy()


@lru_cache(maxsize=1)
def word_pool() -> tuple[str, ...]:
    """Irrelevant real words (colours, fruits, household objects) for the second null."""
    text = resources.files(__package__).joinpath("data/null_words.txt").read_text()
    return tuple(w.strip() for w in text.splitlines() if w.strip() and not w.startswith("#"))


def null_strings(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct random strings of 10 lowercase letters from a generator seeded by ``seed`` (the paper's null)."""
    _int("n_null_personas", n, 0)
    rng = np.random.default_rng([_int("seed", seed, 0, artifacts.SEED_MAX), zlib.crc32(b"null_random")])
    letters = np.array(list(string.ascii_lowercase))
    out: list[str] = []
    while len(out) < n:
        s = "".join(rng.choice(letters, NULL_LENGTH))
        if s not in out:
            out.append(s)
    return out


def null_words(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct irrelevant real words drawn without replacement from ``word_pool()``, seeded."""
    pool = word_pool()
    if _int("n_null_personas", n, 0) > len(pool):
        raise ValueError(f"n_null_personas: at most {len(pool)} (the irrelevant words shipped), got {n}")
    rng = np.random.default_rng([_int("seed", seed, 0, artifacts.SEED_MAX), zlib.crc32(b"null_word")])
    return [pool[i] for i in rng.permutation(len(pool))[:n]]


def check_template(template) -> str:
    """A persona template must be a string with exactly one ``{persona}`` field."""
    ok = isinstance(template, str) and template.count("{persona}") == 1
    if ok:
        try:
            template.format(persona="x")
        except (KeyError, IndexError, ValueError):
            ok = False
    if not ok:
        raise ValueError(f"template: must be a string with exactly one {{persona}} field and no other braces "
                         f"(e.g. {DEFAULT_TEMPLATE!r}), got {template!r}")
    return template


def persona_table(n_null_personas: int = 20, seed: int = 0, categories=None) -> pd.DataFrame:
    """Baseline, real personas (optionally only some ``categories``), random-string and real-word nulls."""
    real = load_personas()
    if categories is not None:
        allowed = sorted(real["category"].unique())
        if isinstance(categories, str) or not categories or set(categories) - set(allowed):
            raise ValueError(f"categories: must be None or a non-empty list drawn from {allowed}, got {categories!r}")
        real = real[real["category"].isin(categories)]
    rows = [{"persona_id": BASELINE, "persona": "", "persona_kind": "baseline", "category": "baseline",
             "source": "no persona: no system message"}]
    rows += [dict(r, persona_kind="real") for r in real.to_dict("records")]
    rows += [{"persona_id": f"null_random_{k:02d}", "persona": s, "persona_kind": "null_random", "category": "null_random",
              "source": f"random {NULL_LENGTH}-letter string, seed {seed}"}
             for k, s in enumerate(null_strings(n_null_personas, seed))]
    rows += [{"persona_id": f"null_word_{k:02d}", "persona": w, "persona_kind": "null_word", "category": "null_word",
              "source": "irrelevant real word (data/null_words.txt)"} for k, w in enumerate(null_words(n_null_personas, seed))]
    return pd.DataFrame(rows, columns=["persona_id", "persona", "persona_kind", "category", "source"])


# ---------------------------------------------------------------- generated questions

NAMES = ("Maria", "Ken", "Aisha", "Tom", "Lena", "Omar", "Sara", "Ivan", "Mei", "Paul", "Nora", "Raj")
THINGS = ("apples", "marbles", "stickers", "books", "coins", "pencils", "shells", "cards", "stamps", "beads")
NONSENSE = ("wugs", "daxes", "blickets", "feps", "toves", "zorbs", "glims", "quids", "snarps", "vexels", "plonks", "mibs")
FRACTIONS = ((1, 2), (1, 3), (2, 3), (1, 4), (3, 4))


def _arithmetic(rng, k: int) -> tuple[str, int, list[int]]:
    """One word problem, its answer and three distractors (off-by-one and wrong-operation)."""
    name, thing = NAMES[rng.integers(len(NAMES))], THINGS[rng.integers(len(THINGS))]
    op = ("add", "subtract", "multiply", "divide")[k % 4]  # the four operations in turn
    if op == "add":
        a = int(rng.integers(12, 60))
        b = int(rng.integers(5, a - 2))  # b < a, so the wrong operation a − b is a positive count
        q = f"{name} has {a} {thing}. {name} gets {b} more {thing}. How many {thing} does {name} have now?"
        ans, wrong = a + b, [a - b]
    elif op == "subtract":
        a = int(rng.integers(30, 90))
        b = int(rng.integers(5, a - 5))
        q = f"{name} has {a} {thing} and gives away {b} of them. How many {thing} does {name} have left?"
        ans, wrong = a - b, [a + b]
    elif op == "multiply":
        a, b = int(rng.integers(3, 10)), int(rng.integers(3, 13))
        q = f"{name} has {a} boxes with {b} {thing} in each box. How many {thing} does {name} have in all?"
        ans, wrong = a * b, [a + b, (a + 1) * b]  # added instead of multiplied; one box too many
    else:
        b, ans = int(rng.integers(2, 10)), int(rng.integers(3, 13))
        a = b * ans
        q = f"{name} shares {a} {thing} equally among {b} friends. How many {thing} does each friend get?"
        wrong = [a - b]
    candidates = [ans + 1, ans - 1, *wrong, ans + 2, ans - 2, ans + 10]  # off-by-one first, then wrong operation
    distractors: list[int] = []
    for c in [ans + (1 if rng.integers(2) else -1)] + wrong + candidates:
        if c > 0 and c != ans and c not in distractors:
            distractors.append(c)
        if len(distractors) == 3:
            break
    return q, ans, distractors


def _quantifier(rng, k: int) -> tuple[str, str, list[str]]:
    """An explicit quantifier question in the monotonicity study's template and nouns (``common.quantifiers``: "There are 12 shells.
    Alice has 5 of the 12 shells. Does Alice have more than 1/3 of the shells?"), Yes or No; the true answer
    alternates with ``k`` (half Yes, half No), as do "more" and "less"."""
    num, den = FRACTIONS[rng.integers(len(FRACTIONS))]
    total = int(rng.integers(6, 61))
    more, want = k % 4 < 2, k % 2 == 0
    while True:
        count = int(rng.integers(1, total))
        if count * den != num * total and ((count * den > num * total) if more else (count * den < num * total)) == want:
            break
    vocab = nouns()
    q = render_line(total, count, vocab[rng.integers(len(vocab))], f"{'more' if more else 'less'} than {num}/{den}", None)
    truth = (count * den > num * total) if more else (count * den < num * total)
    return q, "Yes" if truth else "No", ["No" if truth else "Yes"]


SYLLOGISMS = (  # (premise 1, premise 2, conclusion, valid): classic forms, two valid, two invalid
    ("All {a} are {b}.", "All {b} are {c}.", "all {a} are {c}", True),  # Barbara
    ("No {b} are {c}.", "All {a} are {b}.", "no {a} are {c}", True),  # Celarent
    ("All {a} are {b}.", "All {c} are {b}.", "all {a} are {c}", False),  # undistributed middle
    ("All {a} are {b}.", "Some {b} are {c}.", "some {a} are {c}", False),  # undistributed middle (particular)
)


def _syllogism(rng, k: int) -> tuple[str, str, list[str]]:
    """A syllogism over nonsense words (no world knowledge helps): does the conclusion follow? Yes or No; the four
    forms in turn (``k``), valid and invalid alternating, so half are valid."""
    p1, p2, concl, valid = SYLLOGISMS[(0, 2, 1, 3)[k % 4]]
    a, b, c = (NONSENSE[i] for i in rng.choice(len(NONSENSE), 3, replace=False))
    q = f"{p1.format(a=a, b=b, c=c)} {p2.format(a=a, b=b, c=c)} Does it follow that {concl.format(a=a, b=b, c=c)}?"
    return q, "Yes" if valid else "No", ["No" if valid else "Yes"]


def generate_questions(n_questions: int = 100, logic_share: float = 0.5, seed: int = 0) -> pd.DataFrame:
    """``n_questions`` multiple-choice questions: arithmetic word problems (4 options: the answer, an off-by-one and
    wrong-operation distractors) and logic items (explicit quantifier questions and syllogisms, Yes/No). The gold
    option's position is balanced over the letters; the same parameters always give the same rows."""
    n = _int("n_questions", n_questions, 1)
    if isinstance(logic_share, bool) or not isinstance(logic_share, (int, float)) or not 0 <= logic_share <= 1:
        raise ValueError(f"logic_share: must be a number in [0, 1], got {logic_share!r}")
    rng = np.random.default_rng([_int("seed", seed, 0, artifacts.SEED_MAX), zlib.crc32(b"questions")])
    n_logic = int(round(n * logic_share))
    kinds = ["arithmetic"] * (n - n_logic) + [("quantifier", "syllogism")[k % 2] for k in range(n_logic)]
    rows, seen = [], set()
    counters = {k: 0 for k in QUESTION_TYPES}
    for kind in kinds:
        for _ in range(1000):
            q, ans, wrong = {"arithmetic": _arithmetic, "quantifier": _quantifier, "syllogism": _syllogism}[kind](rng, counters[kind])
            if q not in seen:
                break
        seen.add(q)
        k = len(wrong) + 1
        pos = counters[kind] % k  # gold letter cycles through the positions: no letter is favoured by design
        counters[kind] += 1
        if kind == "arithmetic":
            others = [str(w) for w in rng.permutation(np.array(wrong, dtype=object))]
            options = others[:pos] + [str(ans)] + others[pos:]
        else:
            options = ["Yes", "No"]  # logic items keep the natural order; the gold alternates with the content
        rows.append({"question_id": f"{kind[:3]}_{counters[kind] - 1:04d}", "question_type": kind, "question": q,
                     "options": options, "answer": str(ans), "source": "generated"})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- a researcher's multiple-choice file

def _n_options(value) -> int | None:
    """How many options the first row of a file lists (a list, a JSON list or ``a | b | c``), None if unreadable."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, str):
        s = value.strip()
        try:
            value = json.loads(s) if s.startswith("[") else s.split("|")
        except ValueError:
            return None
    return len(value) if isinstance(value, list) else None


def load_questions(question_file) -> pd.DataFrame:
    """Questions from a multiple-choice file in the custom-prompt format (CSV, TSV, JSONL or Parquet with columns
    ``question``, ``options`` and ``answer``, optionally ``id`` and ``type``), e.g. GSM-MC or MathQA converted to that
    shape. The file is read and checked by the prompt-file loader the custom study uses (``common.prompt_items``), so
    it accepts what ``study: custom`` accepts: options as a list, a JSON list or ``a | b | c``; the answer as an
    option's text or its letter. Every row must list the same number of options (as the loader's ``choices``
    requires)."""
    try:
        raw = read_table(question_file)
        missing = [c for c in ("question", "options", "answer") if c not in raw.frame.columns]
        if missing:
            raise ValueError(f"data_file: {raw.path.name} needs the columns question, options, answer; missing {missing} "
                             f"(has {list(raw.frame.columns)})")
        k = _n_options(raw.frame["options"].iloc[0])
        if k is None or not 2 <= k <= len(LETTERS):
            raise ValueError(f"data_file: {raw.path.name} row 1 (column 'options'): must list 2 to {len(LETTERS)} "
                             f"options as a JSON list or 'a | b | c', got {raw.frame['options'].iloc[0]!r}")
        columns = {"prompt": "question", "choices": "options", "answer": "answer"}
        if "id" in raw.frame.columns:
            columns["item_id"] = "id"
        items = load_items(raw.path, columns=columns, choices=k, option_format="letters")
    except ValueError as err:
        msg = str(err)
        raise ValueError("question_file: " + (msg.removeprefix("data_file: ") if msg.startswith("data_file: ") else msg)) from None
    qtype = items["type"].map(_cell) if "type" in items.columns else pd.Series("", index=items.index)
    return pd.DataFrame({"question_id": items["item_id"].str.replace(r"^row-", "q_", regex=True).to_numpy(),
                         "question_type": [t or "file" for t in qtype],
                         "question": items["prompt"].to_numpy(),
                         "options": [json.loads(o) for o in items["options"]],
                         "answer": items["answer_text"].to_numpy(), "source": raw.path.name})


def _cell(value) -> str:
    """An optional cell as text ("" when absent, None or NaN)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    return str(value).strip()


# ---------------------------------------------------------------- the paired dataset

def render_question(question: str, options) -> str:
    """The question with its options listed as ``A. …`` and the instruction to answer with a letter."""
    listed = "\n".join(f"{letter}. {o}" for letter, o in zip(LETTERS, options))
    return f"{question}\n\n{listed}\n{INSTRUCTION}"


def build_dataset(questions: pd.DataFrame, personas: pd.DataFrame, template: str = DEFAULT_TEMPLATE,
                  seed: int = 0) -> pd.DataFrame:
    """Every persona × every question (paired): the same rendered question for all, the persona as system text."""
    check_template(template)
    if questions.empty or personas.empty:
        raise ValueError("questions: need at least one question and one persona")
    if (personas["persona_kind"] == "baseline").sum() != 1:
        raise ValueError("personas: need exactly one baseline persona (the comparison every DIF score is made against)")
    rows = []
    for p in personas.to_dict("records"):
        system = None if p["persona_kind"] == "baseline" else template.format(persona=p["persona"])
        for q in questions.to_dict("records"):
            opts = list(q["options"])
            letters = list(LETTERS[: len(opts)])
            rows.append({"prompt_id": f"{q['question_id']}__{p['persona_id']}", "question_id": q["question_id"],
                         "question_type": q["question_type"], "persona_id": p["persona_id"], "persona": p["persona"],
                         "persona_kind": p["persona_kind"], "category": p["category"], "system": system,
                         "text": render_question(q["question"], opts), "question": q["question"], "options": opts,
                         "answer": q["answer"], "scored": letters, "gold": letters[opts.index(q["answer"])],
                         "n_options": len(opts), "chance": 1 / len(opts), "source": q["source"], "seed": seed})
    return pd.DataFrame(rows, columns=COLUMNS).astype({"n_options": "int64", "seed": "int64"})


def make_dataset(n_questions: int = 100, logic_share: float = 0.5, n_null_personas: int = 20,
                 template: str = DEFAULT_TEMPLATE, question_file: str | None = None, categories=None,
                 seed: int = 0) -> pd.DataFrame:
    """Questions (generated, or read from ``question_file``) × personas: the run's dataset, deterministic under ``seed``."""
    check_template(template)
    questions = load_questions(question_file) if question_file else generate_questions(n_questions, logic_share, seed)
    return build_dataset(questions, persona_table(n_null_personas, seed, categories), template, seed)


def choice_items(df: pd.DataFrame) -> ChoiceItems:
    """The engine's view: options are the letters shown, gold the correct letter, the persona the system message."""
    systems = [None if (s is None or (isinstance(s, float) and np.isnan(s))) else str(s) for s in df["system"]]
    return ChoiceItems([tuple(s) for s in df["scored"]], df["gold"].tolist(), systems)


def write(df: pd.DataFrame, run_dir, parameters: dict, overwrite: bool = False) -> dict:
    """``{run_dir}/personas.parquet`` + sidecar; refuses to replace a dataset made with other parameters."""
    meta = {"parameters": parameters, "n_questions": int(df["question_id"].nunique()),
            "n_personas": int(df["persona_id"].nunique()),
            "personas_by_kind": {k: int(v) for k, v in df.drop_duplicates("persona_id")["persona_kind"].value_counts().items()}}
    return artifacts.write_dataset(df, paths.dataset_path(run_dir, DATASET_FILE), meta, overwrite)


def overview(df: pd.DataFrame) -> pd.DataFrame:
    """Personas and questions per kind: a check that the design is what was asked for."""
    per = df.drop_duplicates("persona_id").groupby(["persona_kind", "category"]).size().rename("personas")
    return per.reset_index().assign(questions=df["question_id"].nunique(),
                                    prompts=lambda t: t["personas"] * df["question_id"].nunique())
