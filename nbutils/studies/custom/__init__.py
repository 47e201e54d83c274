"""A user's own prompt file (CSV, TSV, JSONL or Parquet) with Yes/No or multiple-choice answers, analysed by group.

``dataset`` reads and checks the file and writes ``{run}/items.parquet``; the shared score notebook scores it through
the engine's choices scorer; ``stats``, ``plots`` and ``analysis`` turn the scores into tables, figures and
``summary.json``. When the file has a ``concept`` column of quantifier concepts, the monotonicity study's concept-learning statistics
run on it too (``nbutils.studies.common.quantifier_stats`` and ``quantifier_mixed_models``).
"""
