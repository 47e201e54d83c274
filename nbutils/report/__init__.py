"""The report wing: a run's ``report.html``, one self-contained page of what its analysis found.

What the rest of the suite and its users take from it (everything else is the wing's own):

- ``write_report(run_dir, study=None, warn=None)``: the page of any run folder; a study read across runs (the
  validation) gets its own page, every other run its study's, made from its executed analysis;
- ``ReportError``: a run that cannot be reported as asked, with what to run;
- ``headline(run_dir)``: the results in words for a terminal (``results.md``'s title and findings);
- ``ran_by(nb)``: when and from which notebook an executed notebook ran;
- ``items_html``, ``paired``, ``ITEMS_SCRIPT``, ``SCRIPT_HASH``: the page's item browser (two models paired, its
  script and the hash the page's policy allows it by); ``ALL_ITEMS``, ``KEEP``: how many items the page holds;
- ``TABLE_HEADING``: the section of the validation's ``results.md`` its page shows first;
- ``live``: the page of an analysis run in JupyterLab or nbclient (the analysis notebooks' first and last cells);
- ``index_lines(folder)``: ``nbutils runs``, the run directories below a folder, each with its study, models, headline
  and report state.

Inside: ``_page`` (the page of a study's run: its executed analysis found and checked), ``_html`` (escaping, cleaned
tables, the template), ``_item_browser``, ``_models`` (the first screen of a report on several models),
``_validation`` (the page of a study read across runs), ``_freshness`` (whether an executed analysis and its report
still match the score files they were made from), ``_run_index`` (the index of runs).
"""
from . import live
from ._item_browser import ITEMS_SCRIPT, SCRIPT_HASH, items_html, paired
from ._run_index import index_lines
from ._page import ALL_ITEMS, KEEP, ReportError, headline, ran_by
from ._validation import TABLE_HEADING, write_report

__all__ = ["ALL_ITEMS", "ITEMS_SCRIPT", "KEEP", "ReportError", "SCRIPT_HASH", "TABLE_HEADING", "headline",
           "index_lines", "items_html", "live", "paired", "ran_by", "write_report"]
