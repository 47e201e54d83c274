"""Cue profiling (seed 004, ICQ): surface cues that skew a dataset's labels, and whether a model uses them.

Not a scoring study: it profiles the dataset and score files of another study's run (see ``analysis``), run by
``notebooks/cues/01_profile.ipynb`` on its own or by a sweep file's ``cues:`` block after the study's analysis.
"""
