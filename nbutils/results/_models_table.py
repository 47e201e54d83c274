"""The models side by side, as a paper's table and figure: one row per model of a quantifier study's run, read from its
``summary.json``, and a forest plot of each model's gap with its 95% CI.

Per model: its name (the ``model`` of the records, as the reader knows it), its number of parameters where the score
file recorded it, the accuracies upward and downward in every condition, and for the headline condition (concept
learning where the run has it) the gap in points, the headline test's odds ratio with its 95% CI in one cell, p, and
what the gap means (``nbutils.results``: is the model above the task floor, do its answers use the examples). Where the
run varied how the prompts were asked, the 95% prediction interval of the gap a new variant would show is a column too.

``frame`` is the table at full precision (``tables/models.csv``); ``shown`` its cells as printed, shared by the
Markdown of ``results.md`` (``markdown``), the report's HTML and the LaTeX of ``tables/models.tex`` (``latex``: booktabs,
one tabular that fits a page for up to ``PAGE_ROWS`` models, a longtable beyond); ``sentences`` says each model's
finding in one sentence; ``forest`` draws the figure (``figures/forest_models.png``). Nothing here parses a model's
name: it is a label, printed escaped wherever it goes.
"""
from __future__ import annotations

import math

import pandas as pd

from ._readings import CONDITION_NAMES, floor_state, has_readings, headline_record, reading
from ..records import Summary, model_block
from ._words import ALPHA, is_finite, on_scale, claim_of, fmt_alpha, fmt_p, odds_ratio_scale, short_method, verdict

MODELS_HEADING = "**The models side by side**"  # where results.md's models table starts (the report shows its own)
PAGE_ROWS = 12  # models a LaTeX table holds on one page; more break across pages (longtable)
MAIN_CONDITION = "concept_learning"  # the headline condition, where a run has it
SHORT_READINGS = {"learned": "learned", "mirror": "mirror of the threshold", "prior": "no use of the examples",
                  "undetermined": "undetermined", "below_floor": "below the floor",
                  "no_evidence": "no evidence", "no_valid_test": "no valid test"}


def applies(summary: dict) -> bool:
    """True for a summary this table is made for: a quantifier study's, whose models carry the readings' facts."""
    return has_readings(summary) and bool(models(summary))


def models(summary: dict) -> list[str]:
    """The run's models in the order of the sweep (the order their scores were written), each with conditions."""
    view = Summary(summary)
    blocks = view.models
    order = view.model_order + list(blocks)
    return [m for m in dict.fromkeys(order) if isinstance(blocks.get(m), dict) and blocks[m].get("conditions")]


def conditions(summary: dict) -> list[str]:
    """The conditions of the run, the headline one first."""
    seen = dict.fromkeys(c for m in models(summary) for c in model_block(summary, m)["conditions"])
    return sorted(seen, key=lambda c: c != MAIN_CONDITION)


def _or(rec: dict | None) -> tuple:
    """The headline record's odds ratio and 95% CI, or Nones when it is not an odds ratio that can be read."""
    if rec is None or verdict(rec) == "invalid" or claim_of(rec).get("scale") != "log_odds_ratio":
        return None, None, None
    est, lo, hi, _ = on_scale(rec, claim_of(rec))
    return est, lo, hi


def frame(summary: dict, alpha: float = ALPHA) -> pd.DataFrame:
    """One row per model at full precision: ``model``, ``parameters`` and per condition ``acc_up``, ``acc_down``,
    ``gap`` (proportions), ``or``, ``or_ci_low``, ``or_ci_high``, ``p``, ``test``, ``reading``, ``above_floor``,
    ``floor_p``, ``uses_examples``, ``examples_p`` (each column suffixed ``_<condition>``); ``pi_low``/``pi_high`` (the
    gap a new prompt variant would show, 95% prediction interval) and ``pi_axis`` (which variants, where several
    axes vary) where the run has them."""
    rows = []
    for m in models(summary):
        block = model_block(summary, m)
        row = {"model": m, "parameters": block.get("n_parameters")}
        for c in conditions(summary):
            cond = block["conditions"].get(c) or {}
            rec = headline_record(summary, m, c)
            est, lo, hi = _or(rec)
            rd = reading(summary, m, c, alpha) if rec is not None else {}
            floor, uses = cond.get("floor") or {}, cond.get("uses_examples") or {}
            row.update({f"{k}_{c}": v for k, v in {
                "acc_up": cond.get("acc_up"), "acc_down": cond.get("acc_down"), "gap": cond.get("gap"),
                "or": est, "or_ci_low": lo, "or_ci_high": hi, "p": rec.get("p") if est is not None else None,
                "test": rec.get("test") if rec else None, "reading": rd.get("reading"),
                "above_floor": floor.get("above"), "floor_p": floor.get("p"), "uses_examples": uses.get("uses"),
                "examples_p": uses.get("p")}.items()})
        pi = _interval(block)
        if pi:
            row.update(pi_low=pi.get("pi_low"), pi_high=pi.get("pi_high"),
                       pi_axis=pi["axis"] if pi["axes"] > 1 or pi["axis"] == "all" else None)
        rows.append(row)
    return pd.DataFrame(rows)


def _interval(block: dict) -> dict | None:
    """The headline condition's 95% prediction interval for a new variant: over the crossed cells (``all``) where it
    is valid, else the varied axis with the most variants (its name in ``axis``); None without a valid one."""
    per = block.get("prediction_interval") or {}
    cond = per.get(MAIN_CONDITION) or next(iter(per.values()), None) or {}
    valid = {axis: v for axis, v in cond.items() if isinstance(v, dict) and v.get("valid") is not False
             and is_finite(v.get("pi_low")) and is_finite(v.get("pi_high"))}
    if not valid:
        return None
    axis = "all" if "all" in valid else max(valid, key=lambda a: (valid[a].get("n_variants") or 0, a))
    return {**valid[axis], "axis": axis, "axes": len([a for a in cond if a != "all"])}


# ---------------------------------------------------------------- as printed

def fmt_params(n) -> str:
    """``135M``, ``1.7B``, ``360M``; empty when unknown."""
    if not is_finite(n) or n <= 0:
        return ""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            x = n / size
            return f"{x:.0f}{unit}" if x >= 100 or x == round(x) else f"{x:.3g}{unit}"
    return str(int(n))


def fmt_or(x) -> str:
    """An odds ratio for a table: ``36.0``, ``3.19``, ``406``, ``0.32``, ``0.012``; powers of ten from 10⁵ on."""
    if not is_finite(x) or x <= 0:
        return "n/a"
    if x >= 1e5 or x < 1e-4:
        return f"{x:.1e}".replace("e+0", "e").replace("e-0", "e−").replace("e+", "e").replace("e-", "e−")
    if x < 0.1:
        return f"{x:.2g}"
    return f"{x:.{0 if x >= 100 else 1 if x >= 10 else 2}f}"


def _pct(x) -> str:
    return f"{100 * x:.1f}" if is_finite(x) else "–"


def _p(p, alpha: float) -> str:
    return fmt_p(p, alpha).removeprefix("p ").removeprefix("= ") if is_finite(p) else ""


def _floor_cell(above, p, alpha: float) -> str:
    if above is None:
        return ""
    return f"{'above' if above else 'not above'} ({_p(p, alpha)})" if is_finite(p) else ("above" if above else "not above")


def _examples_cell(uses, p, alpha: float) -> str:
    """The score test of the examples, as evidence: "yes (p)" where it rejects, "no evidence (p)" where it does not
    (a test that fails to reject never shows that the examples are ignored)."""
    if uses is None:
        return ""
    said = "yes" if uses else "no evidence"
    return f"{said} ({_p(p, alpha)})" if is_finite(p) else said


def shown(summary: dict, alpha: float = ALPHA) -> tuple[list[tuple[str, str]], list[dict]]:
    """The table's columns (key, header) and its rows as printed: percentages with one decimal, the gap in points,
    ``OR [low, high]`` in one cell, p in APA style, the floor and the use of the examples with their p."""
    t = frame(summary, alpha)
    conds = conditions(summary)
    main = conds[0] if conds else None
    cols = [("model", "Model")]
    if t["parameters"].notna().any():
        cols.append(("parameters", "Parameters"))
    for c in conds:
        name = CONDITION_NAMES.get(c, c)
        cols += [(f"acc_up_{c}", f"Up % ({name})"), (f"acc_down_{c}", f"Down % ({name})")]
    cols += [("gap", "Gap, points"), ("or", "OR [95% CI]"), ("p", "p"), ("floor", "Above the floor"),
             ("examples", "Uses the examples"), ("reading", "Reading")]
    if "pi_low" in t:
        cols.append(("pi", "Gap of a new variant, 95% PI"))
    rows = []
    for r in t.to_dict("records"):
        g = {k.removesuffix(f"_{main}"): v for k, v in r.items() if k.endswith(f"_{main}")}
        est, lo, hi = g.get("or"), g.get("or_ci_low"), g.get("or_ci_high")
        ci = f" [{fmt_or(lo)}, {fmt_or(hi)}]" if is_finite(lo) and is_finite(hi) else ""
        row = {"model": str(r["model"]), "parameters": fmt_params(r.get("parameters")),
               "gap": f"{100 * g['gap']:+.1f}" if is_finite(g.get("gap")) else "–",
               "or": fmt_or(est) + ci if is_finite(est) else "not estimable", "p": _p(g.get("p"), alpha),
               "floor": _floor_cell(g.get("above_floor"), g.get("floor_p"), alpha),
               "examples": _examples_cell(g.get("uses_examples"), g.get("examples_p"), alpha),
               "reading": SHORT_READINGS.get(g.get("reading"), ""), "_reading": g.get("reading"),
               "pi": (f"[{100 * r['pi_low']:+.1f}, {100 * r['pi_high']:+.1f}]" + (
                   f" ({r['pi_axis']})" if isinstance(r.get("pi_axis"), str) else "")
                      if is_finite(r.get("pi_low")) and is_finite(r.get("pi_high")) else "")}
        for c in conds:
            row[f"acc_up_{c}"], row[f"acc_down_{c}"] = _pct(r.get(f"acc_up_{c}")), _pct(r.get(f"acc_down_{c}"))
        rows.append(row)
    return cols, rows


def markdown(summary: dict, alpha: float = ALPHA) -> str:
    """The table in Markdown for ``results.md``, under ``MODELS_HEADING`` (what Markdown, its HTML or math would read
    in a name, ``|``, ``<``, ``$``, …, escaped)."""
    cols, rows = shown(summary, alpha)
    esc = (lambda s: "".join("\\" + ch if ch in "\\|*_`[]<>#!$~&{}" else " " if ch == "\n" else ch for ch in str(s)))
    lines = [MODELS_HEADING, "", "| " + " | ".join(h for _, h in cols) + " |",
             "|" + "|".join("---" if k in ("model", "floor", "examples", "reading") else "---:" for k, _ in cols) + "|"]
    lines += ["| " + " | ".join(esc(r[k]) for k, _ in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n\n" + legend(summary, alpha)


def legend(summary: dict, alpha: float = ALPHA) -> str:
    """What the table's columns mean, in one paragraph."""
    conds = conditions(summary)
    main = CONDITION_NAMES.get(conds[0], conds[0]) if conds else ""
    return (f"Up and Down: accuracy (%) on upward and downward concepts. Gap, OR and p: {main}'s upward vs downward "
            "gap (points) and its headline test's odds ratio (conditional on the prompt pair for the GLMM, marginal "
            "for a test standing in for it) with its 95% CI. Above the floor: accuracy against a responder with no "
            "information (one-sided binomial p); uses the examples: the answers follow what the examples say beyond "
            f"the query (score test p); α = {fmt_alpha(alpha)}.")


def latex(summary: dict, alpha: float = ALPHA) -> str:
    """The table as LaTeX (booktabs; ``\\usepackage{booktabs,longtable}``): one tabular for up to ``PAGE_ROWS``
    models, a longtable that repeats its header beyond; names escaped, the CI in the OR's cell."""
    from ._latex import breakable, escape

    cols, rows = shown(summary, alpha)
    cols = [(k, h) for k, h in cols if k not in ("floor", "examples")]  # the reading says them; their p: the CSV
    conds = conditions(summary)
    heads, spec = [], []
    for k, h in cols:
        wrap = {"model": 0.15, "reading": 0.08}.get(k)
        spec.append(rf">{{\raggedright\arraybackslash}}p{{{wrap}\textwidth}}" if wrap else "r")
        short = ("Up" if k.startswith("acc_up") else "Down") if k.startswith("acc_") else {
            "pi": "New variant (PI)", "parameters": "Params"}.get(k, h.split(" (")[0])
        heads.append(escape(short.replace(", points", "")))
    starts = {next(j for j, (k, _) in enumerate(cols) if k == f"acc_up_{c}"): c for c in conds}
    top, j = [], 0
    while j < len(cols):
        if j in starts:
            name = CONDITION_NAMES.get(starts[j], starts[j]).replace("the concept stated", "concept stated")
            top.append(rf"\multicolumn{{2}}{{c}}{{{escape(name)}}}")
            j += 2
        else:
            top.append("")
            j += 1
    rules = "".join(rf"\cmidrule(lr){{{j + 1}-{j + 2}}}" for j in sorted(starts))
    head = [" & ".join(top) + r" \\", rules, " & ".join(heads) + r" \\", r"\midrule"]
    long = len(rows) > PAGE_ROWS
    env = "longtable" if long else "tabular"
    # a reading's one long word may break where LaTeX would not break it itself (the column is narrow)
    cell = (lambda k, v: breakable(escape(v)) if k == "model" else
            escape(v).replace("undetermined", r"undeter\-mined") if k == "reading" else escape(v))
    body = [" & ".join(cell(k, r[k]) for k, _ in cols) + r" \\" for r in rows]
    size = "{\\footnotesize" if len(cols) <= 10 else "{\\scriptsize"  # 10 columns fit a page in small type
    lines = [f"% {len(rows)} models; needs \\usepackage{{booktabs,longtable,array}}", size,
             "\\setlength{\\tabcolsep}{2.5pt}", f"\\begin{{{env}}}{{{''.join(spec)}}}", "\\toprule", *head]
    if long:
        lines += ["\\endhead", "\\bottomrule", "\\endfoot"]
    lines += body + ([] if long else ["\\bottomrule"]) + [f"\\end{{{env}}}", "}"]
    said = legend(summary, alpha) + " The floor's and the score test's p for each model: tables/models.csv."
    lines.append(f"\\par\\smallskip\\noindent{{\\scriptsize {escape(said)}}}\\par")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- in words

def sentences(summary: dict, alpha: float = ALPHA) -> list[str]:
    """Each model's finding in one sentence (at most 60 words with a name of up to 10): its headline condition's
    reading, in the words of the side the data point to, with the numbers that carry it."""
    out = []
    conds = conditions(summary)
    if not conds:
        return out
    c = conds[0]
    where = CONDITION_NAMES.get(c, c)
    cols, rows = shown(summary, alpha)
    for r in rows:
        m, kind = r["model"], r["_reading"]
        rec = headline_record(summary, m, c)
        v = verdict(rec, alpha) if rec is not None else "invalid"
        nums = (f"{odds_ratio_scale(rec)} OR {r['or']}, p {'= ' if r['p'][:1] == '.' else ''}{r['p']}, "
                f"{short_method(rec)}") if r["p"] and rec is not None else ""  # the test and its scale, as results.md
        better, worse = ("upward", "downward") if v == "more" else ("downward", "upward")
        accs = f"{r[f'acc_{better[:-4]}_{c}']}% {better} vs {r[f'acc_{worse[:-4]}_{c}']}% {worse}"
        stated = c == "explicit"
        if kind == "learned":
            text = (f"{better} concepts were {'answered' if stated else 'learned'} better than {worse} ones under "
                    f"{where} ({accs} correct; {nums})" + _evidence_short(summary, m, c, alpha))
        elif kind in ("prior", "mirror", "undetermined"):
            what = {"prior": "with no use of the examples shown beyond a margin",
                    "mirror": "as the mirror: the answers read the examples' threshold as \"more than\"",
                    "undetermined": "from a source the data cannot name"}[kind]
            text = (f"{better} concepts were answered right more often under {where} ({accs}; {nums}), {what}"
                    + _evidence_short(summary, m, c, alpha))
        elif kind == "below_floor":
            fl = (model_block(summary, m)["conditions"].get(c) or {}).get("floor") or {}
            state = floor_state(fl, alpha)
            text = (f"{'not above the task floor' if state == 'below' else 'at the edge of the task floor'} under "
                    f"{where} ({_pct(fl.get('accuracy'))}% correct against {_pct(fl.get('chance'))}% by chance), so no "
                    "conclusion about a bias")
        elif kind == "no_evidence":
            accs = f"{r[f'acc_up_{c}']}% upward vs {r[f'acc_down_{c}']}% downward"
            text = f"the gap under {where} ({accs}) is not significant at α = {fmt_alpha(alpha)} ({nums})"
        else:
            text = (f"no valid test of the gap under {where} ({r[f'acc_up_{c}']}% upward vs {r[f'acc_down_{c}']}% "
                    "downward correct)")
        out.append(f"{m}: {text}.")
    return out


def _evidence_short(summary: dict, model, condition, alpha: float) -> str:
    """The test behind a reading of where a gap comes from, in a parenthesis: the twins' deciding test, or the score
    test where the run has no twins."""
    cond = (model_block(summary, model).get("conditions") or {}).get(condition) or {}
    tw, uses = cond.get("twins") or {}, cond.get("uses_examples") or {}
    if tw.get("labels") or tw.get("threshold"):
        lab, both = tw.get("labels") or {}, (tw.get("threshold") or {}).get("both") or {}
        bits = []
        if is_finite(lab.get("estimate")):
            bits.append(f"label twins net {100 * lab['estimate']:+.0f} points, {fmt_p(lab.get('p'), alpha)}")
        if is_finite(both.get("upward_reading")):
            bits.append(f"threshold twins as \"more than\" net {100 * both['upward_reading']:+.0f} points, "
                        f"{fmt_p(both.get('upward_reading_p'), alpha)}")
        return f" ({'; '.join(bits)})" if bits else ""
    if is_finite(uses.get("p")):
        return f" (score test of the examples, {fmt_p(uses['p'], alpha)}; no twin prompts)"
    return ""


# ---------------------------------------------------------------- the figure

def forest(summary: dict, alpha: float = ALPHA):
    """Each model's headline odds ratio with its 95% CI, per condition (log scale; 1 = no gap), the models top to
    bottom in the sweep's order; a hollow marker: not above the task floor; a model with no valid test is named so."""
    import textwrap

    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, NullFormatter

    names = models(summary)
    conds = conditions(summary)
    t = frame(summary, alpha).set_index("model")
    n = len(names)
    height = max(0.34 * n * max(1, len(conds)), 1.2) + 1.9  # the panel at least 1.2 in tall, 0.55 in for the legend
    fig, ax = plt.subplots(figsize=(7.6, height))
    colors = ["#0969da", "#bc4c00", "#1a7f37", "#8250df"]
    offsets = np.linspace(-0.18, 0.18, len(conds)) if len(conds) > 1 else [0.0]
    finite = [x for c in conds for k in ("or_ci_low", "or_ci_high", "or") for x in t.get(f"{k}_{c}", [])
              if is_finite(x)]
    lo_lim, hi_lim = (min(finite + [0.5]) / 1.6, max(finite + [2.0]) * 1.6) if finite else (0.1, 10)
    for j, c in enumerate(conds):
        label = CONDITION_NAMES.get(c, c)
        for i, m in enumerate(names):
            y = i + offsets[j]
            est, lo, hi = (t.at[m, f"{k}_{c}"] for k in ("or", "or_ci_low", "or_ci_high"))
            if not is_finite(est):
                ax.text(math.sqrt(lo_lim * hi_lim), y, "no valid test", ha="center", va="center", fontsize=8,
                        color=colors[j % 4])
                continue
            if is_finite(lo) and is_finite(hi):
                ax.plot([max(lo, lo_lim), min(hi, hi_lim)], [y, y], color=colors[j % 4], lw=1.8)
            above = t.at[m, f"above_floor_{c}"]
            hollow = above is not None and not pd.isna(above) and not bool(above)
            ax.plot([est], [y], "o", ms=7, color=colors[j % 4], mfc="white" if hollow else colors[j % 4])
    ax.axvline(1, color="#555", lw=1, ls="--")
    ax.set_xscale("log")
    ax.set_xlim(lo_lim, hi_lim)
    ax.set_yticks(range(n), [textwrap.fill(str(m), 30) for m in names])
    nice = [m * 10.0 ** e for e in range(-4, 5) for m in (1, 2, 5)]
    ax.set_xticks([v for v in nice if lo_lim <= v <= hi_lim] or [1])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())  # plain numbers only, never 2×10⁰
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("odds ratio, upward vs downward correct (95% CI; log scale; 1 = no gap)")
    ax.set_title("Each model's gap: its headline test's odds ratio", fontsize=11)
    seen = {CONDITION_NAMES.get(c, c): Line2D([], [], marker="o", color=colors[j % 4], lw=1.8)
            for j, c in enumerate(conds)}
    if seen:  # below the axis label, in a band of its own
        fig.legend(seen.values(), seen.keys(), loc="lower center", bbox_to_anchor=(0.5, 0.0), fontsize=8,
                   frameon=False, ncol=len(seen), title="hollow marker: not above the task floor", title_fontsize=8)
    ax.grid(axis="x", color="#ddd", lw=0.6)
    fig.tight_layout(rect=(0, 0.55 / height if seen else 0, 1, 1))
    return fig
