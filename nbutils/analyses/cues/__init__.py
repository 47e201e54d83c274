"""Cue profiling (ICQ, Huang and Zhu): surface cues that skew a dataset's labels, and whether a model uses them.

A run analysis, not a study: it profiles the dataset and score files of any choices study's run with gold answers
(see ``analysis``), run by ``notebooks/cues/01_profile.ipynb`` on its own or by a sweep file's ``cues:`` block after
the study's analysis.
"""
