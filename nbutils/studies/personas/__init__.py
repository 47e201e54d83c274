"""The DIF paper: does a sociodemographic persona change *which* questions a model answers correctly?

``dataset`` builds the paired persona × question dataset (personas, seeded null personas, generated or loaded
multiple-choice questions) and writes ``{run}/personas.parquet``; the shared score notebook scores it through the
engine's choices scorer (the answer is the option letter with the highest log-probability); ``stats``, ``plots``
and ``analysis`` turn the scores into tables, figures and ``summary.json``.
"""
