"""The results wing: what a run's records say, in words and in tables.

Its face (the names below) is what the rest of the suite uses; the modules behind it are private:

- ``_words``: the sentence engine that turns a ``summary.json`` record into an APA-style sentence, and what counts as
  a finding (``found``, one rule for the report and ``nbutils runs``);
- ``_method_names``: each statistical procedure's name in words;
- ``_readings``: what a quantifier study's headline means per model and condition (one of its readings);
- ``_headline``: a run's headline for scripts and the report's first table, why a test is not estimable, what gap a
  design could detect;
- ``_models_table``: the models side by side (table, LaTeX, sentences, forest plot);
- ``_terminal_table``: the results as a compact table for a terminal;
- ``_latex``: a table as LaTeX that compiles (escaped, booktabs, human labels, split into parts).
"""
from __future__ import annotations

from ._headline import entries, fit_caveats, generic_text, power_sentence, reading_words, table_rows
from ._latex import escape as latex_escape, table as latex_table
from ._method_names import METHODS, SHORT_METHODS
from ._models_table import MODELS_HEADING, applies as models_applies, conditions as models_conditions
from ._models_table import forest as models_forest, frame as models_frame, latex as models_latex
from ._models_table import legend as models_legend, markdown as models_markdown, models as model_names
from ._models_table import sentences as models_sentences, shown as models_shown
from ._readings import reading
from ._terminal_table import opening, run_table_lines
from ._words import (EVIDENCE, fmt_alpha, fmt_num, fmt_p, fmt_p_cell, fmt_ratio, found, headline_records, is_finite,
                     note_lines, paragraph, phrase, plural, reason, replaced_dropped, sentence, short_method, verdict)

__all__ = ["EVIDENCE", "METHODS", "MODELS_HEADING", "SHORT_METHODS", "entries", "fit_caveats", "fmt_alpha", "fmt_num",
           "fmt_p", "fmt_p_cell", "fmt_ratio", "found", "generic_text", "headline_records", "is_finite", "latex_escape",
           "latex_table", "model_names",
           "models_applies", "models_conditions", "models_forest", "models_frame", "models_latex", "models_legend",
           "models_markdown", "models_sentences", "models_shown", "note_lines", "opening", "paragraph", "phrase",
           "plural", "power_sentence", "reading", "reading_words", "reason", "replaced_dropped", "run_table_lines",
           "sentence", "short_method", "table_rows", "verdict"]
