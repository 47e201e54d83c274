"""Code several studies share, in the open: any study (and any run analysis) may import it; it imports no study and
not the registry.

- ``quantifiers``: quantifier concepts ("more than 1/2"), their example space, and the monotonicity study's sentence template with
  its nouns (the monotonicity prompts, the personas study's quantifier questions);
- ``rules``: the candidate rules' answers to a few-shot quantifier prompt (the monotonicity analysis, cue profiling);
- ``quantifier_stats``: accuracy, Appendix-B table and pooled gap on any frame with a concept column (the monotonicity
  study, the custom study on a file's ``concept`` column);
- ``quantifier_mixed_models``: the mixed-effects test of the same gap (lme4's GLMM through the script ``glmm.R``, else a
  bias-reduced GEE);
- ``prompt_files``: reading a prompt file (CSV, TSV, JSONL, Parquet) as it is, every byte checked to be UTF-8;
- ``prompt_items``: checking its rows and turning them into items (the custom study, the personas study's question
  files).
"""
