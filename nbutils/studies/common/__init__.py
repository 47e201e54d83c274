"""Code several studies share, in the open: any study (and any run analysis) may import it; it imports no study and
not the registry.

- ``quantifiers``: quantifier concepts ("more than 1/2"), their example space, and the monotonicity study's sentence template with
  its nouns (the monotonicity prompts, the personas study's quantifier questions);
- ``rules``: the candidate rules' answers to a few-shot quantifier prompt (the monotonicity analysis, cue profiling);
- ``quantifier_stats``: accuracy, Appendix-B table, pooled gap and mixed model on any frame with a concept column
  (the monotonicity study, the custom study on a file's ``concept`` column), with the lme4 script ``glmm.R``;
- ``prompt_files``: reading and checking a prompt file (CSV, TSV, JSONL, Parquet) into items (the custom study, the
  personas study's question files).
"""
