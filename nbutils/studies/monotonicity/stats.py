"""Statistics of the monotonicity study: accuracy with CIs, gaps, mixed models, paired tests, signal detection."""
from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.contingency_tables import StratifiedTable, mcnemar

from ...artifacts import json_clean
from ...stats import holm, record, sign_flip_test, t_interval, wilson

CONCEPT_KEYS = ["family", "quantifier", "threshold", "monotonicity"]


def threshold_value(threshold: str) -> float:
    """Numeric value of a threshold string ("3/10" → 0.3), for ordering columns."""
    return float(Fraction(threshold))



def accuracy_table(df: pd.DataFrame) -> pd.DataFrame:
    """Model × condition × concept: n, accuracy, 95% Wilson CI, exact binomial p vs 0.5, Holm p within model."""
    rows = []
    for (model, condition, concept), g in df.groupby(["model", "condition", "concept"], sort=False):
        n, k = len(g), int(g["correct"].sum())
        lo, hi = wilson(k, n)
        rows.append({"model": model, "condition": condition, "concept": concept,
                     **{c: g[c].iloc[0] for c in CONCEPT_KEYS}, "n": n, "n_correct": k,
                     "accuracy": k / n, "ci_low": lo, "ci_high": hi,
                     "p_binom": sps.binomtest(k, n, 0.5).pvalue, "yes_rate": float(g["pred_yes"].mean())})
    out = pd.DataFrame(rows)
    out["p_holm"] = out.groupby("model")["p_binom"].transform(lambda s: holm(s.to_numpy()))
    out["_t"] = out["threshold"].map(threshold_value)
    return out.sort_values(["model", "condition", "family", "_t", "quantifier"]).drop(columns="_t").reset_index(drop=True)


def appendix_b(acc: pd.DataFrame) -> pd.DataFrame:
    """The seeds' Appendix-B layout: rows [more than p]/[less than p] per model and condition, columns thresholds, cells %."""
    t = acc.assign(row=lambda d: "[" + d["quantifier"].str.replace("_", " ") + " p]",
                   pct=lambda d: (100 * d["accuracy"]).round(1))
    wide = t.pivot_table(index=["model", "condition", "family", "row"], columns="threshold", values="pct", aggfunc="first")
    cols = sorted(wide.columns, key=threshold_value)
    return wide[cols].sort_index(level=["model", "condition", "family", "row"], ascending=[True, True, True, False])


def _matched(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose threshold has both an upward and a downward concept in the same model, condition and family."""
    both = df.groupby(["model", "condition", "family", "threshold"])["monotonicity"].transform("nunique") == 2
    return df[both]


def _cluster(df: pd.DataFrame) -> pd.Series:
    """The unit of replication: one threshold of one family ("proportional:1/3"), shared by its up and down concept."""
    return df["family"].astype(str) + ":" + df["threshold"].astype(str)


def _empirical_logit(k, n):
    """log((k + ½) / (n − k + ½)): finite at 0% and 100%, nearly unbiased for the log-odds."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    return np.log((k + 0.5) / (n - k + 0.5))


def threshold_cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per model × condition × matched threshold: counts up and down, the accuracy gap and the log odds ratio.

    These are the units every threshold-level test and the cluster bootstrap resample: a claim about thresholds in
    general rests on how these K values vary, not on the thousands of prompts within them.
    """
    m = _matched(df)
    if m.empty:
        return pd.DataFrame(columns=["model", "condition", "cluster", "n_up", "k_up", "n_down", "k_down", "gap", "log_or"])
    m = m.assign(cluster=_cluster(m), up=m["monotonicity"] == "upward", correct=m["correct"].astype(bool))
    g = m.groupby(["model", "condition", "cluster", "up"], sort=False)["correct"].agg(["size", "sum"]).unstack("up")
    out = pd.DataFrame({"n_up": g[("size", True)], "k_up": g[("sum", True)],
                        "n_down": g[("size", False)], "k_down": g[("sum", False)]}).astype(int).reset_index()
    out["gap"] = out["k_up"] / out["n_up"] - out["k_down"] / out["n_down"]
    out["log_or"] = _empirical_logit(out["k_up"], out["n_up"]) - _empirical_logit(out["k_down"], out["n_down"])
    return out


def gap_by_threshold(df: pd.DataFrame) -> pd.DataFrame:
    """Upward minus downward accuracy at each matched threshold: Fisher's exact test, Holm within model × condition.

    A per-threshold test is about that threshold only; ``p_holm`` controls the family-wise error over the
    thresholds of one model and condition.
    """
    rows = []
    for key, g in _matched(df).groupby(["model", "condition", "family", "threshold"], sort=False):
        up, down = g[g.monotonicity == "upward"]["correct"], g[g.monotonicity == "downward"]["correct"]
        table = [[up.sum(), len(up) - up.sum()], [down.sum(), len(down) - down.sum()]]
        rows.append(dict(zip(["model", "condition", "family", "threshold"], key), n_up=len(up), n_down=len(down),
                         acc_up=up.mean(), acc_down=down.mean(), gap=up.mean() - down.mean(),
                         p_fisher=sps.fisher_exact(table).pvalue))
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm"] = out.groupby(["model", "condition"])["p_fisher"].transform(lambda s: holm(s.to_numpy()))
    return out


def cluster_bootstrap_gap(cells: pd.DataFrame, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    """95% percentile CI of the pooled accuracy gap, resampling whole thresholds (never prompts within them)."""
    k = len(cells)
    if k < 2:
        return float("nan"), float("nan")
    pick = rng.integers(0, k, size=(n_boot, k))
    cols = {c: cells[c].to_numpy(dtype=float)[pick].sum(axis=1) for c in ("k_up", "n_up", "k_down", "n_down")}
    gaps = cols["k_up"] / cols["n_up"] - cols["k_down"] / cols["n_down"]
    return float(np.quantile(gaps, 0.025)), float(np.quantile(gaps, 0.975))


def _mantel_haenszel(cells: pd.DataFrame) -> dict:
    """Cochran–Mantel–Haenszel test (no continuity correction, no added 0.5), MH odds ratio with CI, Breslow–Day."""
    tables = [np.array([[r.k_up, r.n_up - r.k_up], [r.k_down, r.n_down - r.k_down]], dtype=float)
              for r in cells.itertuples(index=False)]
    out = {"or_mh": np.nan, "or_mh_ci_low": np.nan, "or_mh_ci_high": np.nan, "p_cmh": np.nan, "p_breslow_day": np.nan}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        st = StratifiedTable(tables)
        out["p_cmh"] = float(st.test_null_odds(correction=False).pvalue)
        out["or_mh"] = float(st.oddsratio_pooled)
        try:
            out["or_mh_ci_low"], out["or_mh_ci_high"] = (float(v) for v in st.oddsratio_pooled_confint())
            out["p_breslow_day"] = float(st.test_equal_odds().pvalue) if len(tables) > 1 else np.nan
        except (ZeroDivisionError, ValueError, np.linalg.LinAlgError):
            pass
    return out


def pooled_gap(df: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per model and condition: the gap pooled over matched thresholds, with two kinds of inference.

    About thresholds in general (the claim a paper makes): ``log_or_mean`` is the mean over thresholds of the
    per-threshold log odds ratio, with a t(K−1) CI and a sign-flip test (``p_signflip``, exact for K ≤ 16); the
    accuracy gap's CI resamples thresholds (cluster bootstrap). About these thresholds only (fixed-threshold
    tests): the Cochran–Mantel–Haenszel test ``p_cmh`` (no continuity correction), the Mantel–Haenszel odds ratio
    with its Robins–Breslow–Greenland CI, and Breslow–Day's test that the odds ratio is the same at every threshold.
    The CMH test rejects far more often than 5% when the gap varies from threshold to threshold around a mean of 0
    (benchmarks/results/calibration.json): read it as a statement about the thresholds in the table.
    """
    rng = np.random.default_rng(seed)
    cells = threshold_cells(df)
    rows = []
    for (model, condition), c in cells.groupby(["model", "condition"], sort=False):
        n_up, n_down = c["n_up"].sum(), c["n_down"].sum()
        acc_up, acc_down = c["k_up"].sum() / n_up, c["k_down"].sum() / n_down
        lo, hi = cluster_bootstrap_gap(c, n_boot, rng)
        mean, se, t_lo, t_hi = t_interval(c["log_or"])
        p_sf, exact = sign_flip_test(c["log_or"], seed=seed)
        rows.append({"model": model, "condition": condition, "n_thresholds": len(c), "n": int(n_up + n_down),
                     "acc_up": acc_up, "acc_down": acc_down, "gap": acc_up - acc_down,
                     "gap_ci_low": lo, "gap_ci_high": hi, "log_or_mean": mean, "log_or_se": se,
                     "log_or_ci_low": t_lo, "log_or_ci_high": t_hi, "p_signflip": p_sf, "signflip_exact": exact,
                     **_mantel_haenszel(c)})
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm_models"] = out.groupby("condition")["p_cmh"].transform(lambda s: holm(s.to_numpy()))
    return out


def gap_difference(df: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Per model: does the gap change when the concept is explicit? Threshold-level test of the interaction.

    For every threshold with both conditions, the concept-learning log odds ratio (up vs down) minus the explicit
    one; their mean (> 0: the gap shrinks when explicit) with a t(K−1) CI and a sign-flip test.
    """
    cells = threshold_cells(df)
    rows = []
    for model, c in cells.groupby("model", sort=False):
        wide = c.pivot_table(index="cluster", columns="condition", values="log_or", aggfunc="first")
        if not {"concept_learning", "explicit"} <= set(wide.columns):
            continue
        diff = (wide["concept_learning"] - wide["explicit"]).dropna()
        mean, se, lo, hi = t_interval(diff)
        p, exact = sign_flip_test(diff, seed=seed)
        rows.append({"model": model, "n_thresholds": len(diff), "log_or_cl_minus_explicit": mean, "se": se,
                     "ci_low": lo, "ci_high": hi, "p_signflip": p, "signflip_exact": exact})
    return pd.DataFrame(rows)


def _design(g: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[str]]:
    """0/1 columns u (upward), e (explicit), ue (their product), ucl = u·(1 − e); the fixed terms; notes."""
    e = (g["condition"] == "explicit").astype(float)
    u = (g["monotonicity"] == "upward").astype(float)
    d = g.assign(correct=g["correct"].astype(float), u=u, e=e, ue=u * e, ucl=u * (1 - e), cluster=_cluster(g))
    notes = []
    terms = ["u"] if d["u"].nunique() > 1 else []
    if d["e"].nunique() > 1:
        terms += ["e"] + (["ue"] if terms else [])
    else:
        notes.append(f"only one condition ({g['condition'].iloc[0]}): no condition term")
    if not terms:
        notes.append("only one monotonicity: nothing to compare")
    return d, terms, notes


# term key → (reported term, condition); "u@explicit" is the gap under the explicit condition, β_u + β_ue
TERM_NAMES = {"u": "upward", "e": "explicit", "ue": "upward:explicit", "u@explicit": "upward"}
TERM_NOTES = {"u": "log odds ratio upward vs downward (the gap)",
              "e": "log odds ratio explicit vs concept learning, downward concepts",
              "ue": "change of the gap's log odds ratio when explicit (< 0: the gap shrinks)",
              "u@explicit": "log odds ratio upward vs downward (the gap)"}


SEPARATION = "an estimate beyond ±8 log-odds: (quasi-)complete separation, the test is not reliable"


def _term_condition(key: str, conditions: list[str]) -> str | None:
    if key == "u@explicit":
        return "explicit"
    if key == "u":
        return "concept_learning" if len(conditions) > 1 else conditions[0]
    return None


def gee_model(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: GEE logit ``correct ~ u + e + u·e``, clustered by threshold, exchangeable working correlation,
    bias-reduced (Mancl–DeRouen) sandwich covariance, and t(K−1) p-values and CIs for K thresholds.

    The pure-Python test, calibrated for the 5–20 thresholds a study has (the plain robust SE with normal
    p-values rejected a true null 10–13% of the time at 10 thresholds). ``u`` is the gap under concept
    learning; the gap under the explicit condition is the contrast u + u·e.
    """
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    rows = []
    for model, g in df.groupby("model", sort=False):
        d, terms, notes = _design(g)
        k = d["cluster"].nunique()
        conditions = list(dict.fromkeys(g["condition"]))
        base = {"model": model, "test": "gee_bias_reduced", "formula": "correct ~ " + (" + ".join(terms) or "1"),
                "random_effects": "", "n": len(d), "n_thresholds": k}
        if not terms:
            continue
        if d["correct"].nunique() < 2:
            rows.append({**base, "valid": False, "note": "; ".join(notes + ["every answer equally correct: no model fitted"])})
            continue
        valid = k >= 2
        if k < 2:
            notes.append("one threshold: no clustered inference (a plain logistic GLM, read as about this threshold only)")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if k >= 2:
                    fit = smf.gee(base["formula"], "cluster", d, family=sm.families.Binomial(),
                                  cov_struct=sm.cov_struct.Exchangeable()).fit(cov_type="bias_reduced")
                    dfree = k - 1
                else:
                    fit = smf.glm(base["formula"], d, family=sm.families.Binomial()).fit()
                    dfree = np.inf
            cov = np.asarray(fit.cov_params())
            names = list(fit.params.index)
        except Exception as err:  # noqa: BLE001 - reported in the table, never a crash
            rows.append({**base, "valid": False, "note": "; ".join(notes + [f"GEE failed: {type(err).__name__}: {err}"])})
            continue
        contrasts = {t: np.eye(len(names))[names.index(t)] for t in terms}
        if "ue" in terms:
            contrasts["u@explicit"] = contrasts["u"] + contrasts["ue"]
        if 2 <= k <= len(names):
            # the clustered (sandwich) covariance sums K cluster scores that add up to zero: its rank is at most
            # K − 1, so with no more thresholds than coefficients it is singular and its SEs are meaningless
            valid = False
            notes.append(f"not estimable: the clustered GEE needs more thresholds than coefficients ({k} thresholds, "
                         f"{len(names)} coefficients); use at least {len(names) + 1} thresholds")
        q = float(sps.t.ppf(0.975, dfree))
        for key, c in contrasts.items():
            est, var = float(c @ fit.params.to_numpy()), float(c @ cov @ c)
            se = float(np.sqrt(var)) if np.isfinite(var) and var > 0 else np.nan
            ok = valid and bool(np.isfinite(se))
            sep = [SEPARATION] if abs(est) > 8 else []
            tval = est / se if ok else np.nan
            rows.append({**base, "term": TERM_NAMES[key], "condition": _term_condition(key, conditions),
                         "estimate": est if ok else np.nan, "se": se if ok else np.nan,
                         "ci_low": est - q * se if ok else np.nan, "ci_high": est + q * se if ok else np.nan,
                         "statistic": tval, "df": dfree, "p": float(2 * sps.t.sf(abs(tval), dfree)) if ok else np.nan,
                         "valid": ok and not sep, "meaning": TERM_NOTES[key], "note": "; ".join(notes + sep)})
    return pd.DataFrame(rows)


GLMM_R = r"""
suppressPackageStartupMessages(library(lme4))
ctrl <- glmerControl(optimizer = "bobyqa", optCtrl = list(maxfun = 1e5))
SINGULAR <- "boundary (singular) fit: see help('isSingular')"
nb_fit <- function(fixed, random, d) {
  msgs <- character(0)
  f <- stats::as.formula(paste(c(fixed, random), collapse = " + "))
  go <- function(start = NULL) withCallingHandlers(tryCatch(
      if (length(random)) glmer(f, data = d, family = binomial, control = ctrl, start = start)
      else glm(f, data = d, family = binomial),
      error = function(e) { msgs <<- c(msgs, paste("error:", conditionMessage(e))); NULL }),
    warning = function(w) { msgs <<- c(msgs, conditionMessage(w)); invokeRestart("muffleWarning") },
    message = function(w) { msgs <<- c(msgs, trimws(conditionMessage(w))); invokeRestart("muffleMessage") })
  m <- go()
  alarm <- function(m) !is.null(m) && inherits(m, "merMod") && length(setdiff(m@optinfo$conv$lme4$messages, SINGULAR))
  if (alarm(m)) {  # lme4's advice for a convergence alarm: restart from the estimates; keep it only if it stays
    msgs <- character(0)
    m <- go(list(theta = getME(m, "theta"), fixef = getME(m, "fixef")))
  }
  conv <- if (is.null(m)) "no fit" else if (inherits(m, "merMod")) setdiff(m@optinfo$conv$lme4$messages, SINGULAR)
          else if (!m$converged) "glm did not converge" else character(0)
  conv <- unique(c(conv, grep("converge|error|failure", msgs, value = TRUE)))
  list(m = m, singular = !is.null(m) && inherits(m, "merMod") && isSingular(m, tol = 1e-4), conv = conv)
}
RAND <- c(threshold = "(1 | cluster)", slope = "(0 + uc | cluster)", noun = "(1 | noun)", pair = "(1 | pair)")
sds <- function(m) {
  vc <- as.data.frame(VarCorr(m))
  key <- ifelse(vc$grp == "noun", "noun", ifelse(vc$grp == "pair", "pair", ifelse(vc$var1 == "uc", "slope", "threshold")))
  stats::setNames(vc$sdcor, key)
}
one_unit <- function(d) {
  d$uc <- d$u - 0.5
  has_u <- length(unique(d$u)) > 1
  has_e <- length(unique(d$e)) > 1
  fixed <- c(if (has_u) "u", if (has_e) "e", if (has_u && has_e) "ue")
  form <- function(keep) paste("correct ~", if (length(keep)) paste(keep, collapse = " + ") else "1")
  reduced <- list()
  for (t in fixed) reduced[[t]] <- form(setdiff(fixed, t))
  if (has_u && has_e) reduced[["u@explicit"]] <- form(c("e", "ucl"))
  active <- c(if (length(unique(d$cluster)) > 1) "threshold", if (length(unique(d$cluster)) > 1 && has_u) "slope",
              if (length(unique(d$noun)) > 1) "noun", if (has_e && any(duplicated(d$pair))) "pair")
  if (CONFIG != "auto") active <- intersect(active, strsplit(CONFIG, ",")[[1]])
  notes <- character(0)
  repeat {
    full <- nb_fit(form(fixed), RAND[active], d)
    if (is.null(full$m) || !full$singular || !length(active)) break
    s <- sds(full$m)[active]
    zero <- names(s)[s < 1e-4]
    if (!length(zero)) zero <- names(which.min(s))
    notes <- c(notes, sprintf("singular fit: dropped %s (SD estimated %.2g)", RAND[zero], s[zero]))
    active <- setdiff(active, zero)
  }
  info <- data.frame(formula = form(fixed), random = paste(RAND[active], collapse = " + "),
                     singular = full$singular, converged = !length(full$conv),
                     valid = !is.null(full$m) && !full$singular && !length(full$conv),
                     note = paste(c(notes, if (length(full$conv)) paste("full model:", full$conv),
                                    if (full$singular) "singular fit"), collapse = "; "),
                     sd = if (!is.null(full$m) && length(active)) paste(sprintf("%s %.3f", names(sds(full$m)), sds(full$m)), collapse = ", ") else "")
  if (is.null(full$m) || !length(fixed)) return(list(info = info, terms = NULL))
  co <- summary(full$m)$coefficients
  V <- as.matrix(vcov(full$m))
  ll_full <- as.numeric(logLik(full$m))
  rows <- list()
  for (t in names(reduced)) {
    cvec <- stats::setNames(rep(0, nrow(co)), rownames(co))
    if (t == "u@explicit") cvec[c("u", "ue")] <- 1 else cvec[t] <- 1
    est <- sum(cvec * co[, 1]); se <- sqrt(as.numeric(t(cvec) %*% V %*% cvec))
    red <- nb_fit(reduced[[t]], RAND[active], d)
    chisq <- if (is.null(red$m)) NA else 2 * (ll_full - as.numeric(logLik(red$m)))
    tnote <- c(if (length(red$conv)) paste("reduced model:", red$conv),
               if (!is.na(chisq) && chisq < -1e-3) "reduced model fits better than the full one: optimizer failure")
    rows[[t]] <- data.frame(key = t, estimate = est, se = se, chisq = max(chisq, 0), df = 1,
                            p = stats::pchisq(max(chisq, 0), 1, lower.tail = FALSE),
                            p_wald = 2 * stats::pnorm(-abs(est / se)),
                            valid = info$valid && !length(tnote) && !is.na(chisq), note = paste(tnote, collapse = "; "))
  }
  list(info = info, terms = do.call(rbind, rows))
}
CONFIG <- as.character(nb_in("config")$random[1])
all_d <- nb_in("glmm")
infos <- list(); terms <- list()
for (unit in unique(all_d$unit)) {
  r <- one_unit(all_d[all_d$unit == unit, ])
  infos[[unit]] <- cbind(unit = unit, r$info)
  if (!is.null(r$terms)) terms[[unit]] <- cbind(unit = unit, r$terms)
}
nb_out(do.call(rbind, infos), "info")
nb_out(if (length(terms)) do.call(rbind, terms) else data.frame(unit = character(0)), "terms")
"""


def glmm_input(df: pd.DataFrame, unit: str = "model") -> pd.DataFrame:
    """The columns the lme4 script reads: unit (one fit each), correct, u, e, ue, ucl, cluster, noun, pair."""
    d, _, _ = _design(df)
    noun = d["query_noun"].astype(str) if "query_noun" in d else "none"
    pair = d["pair_id"].astype(str) if "pair_id" in d else np.arange(len(d)).astype(str)
    return pd.DataFrame({"unit": d[unit].astype(str), "correct": d["correct"].astype(int), "u": d["u"].astype(int),
                         "e": d["e"].astype(int), "ue": d["ue"].astype(int), "ucl": d["ucl"].astype(int),
                         "cluster": d["cluster"], "noun": noun, "pair": pair})


def run_glmm(data: pd.DataFrame, seed: int = 0, random: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit the GLMM and its likelihood-ratio tests in one ``Rscript`` for every unit of ``data`` (see glmm_input).

    ``random`` restricts the random terms tried (names among "threshold", "slope", "noun", "pair"; default: every
    one the data identify). Returns (info per unit, terms per unit × term key). Raises rbridge.RError when R fails.
    """
    from ...rbridge import run_r

    config = pd.DataFrame({"random": [",".join(random) if random else "auto"]})
    out = run_r(GLMM_R, {"glmm": data, "config": config}, seed=seed)
    return out["info"], out.get("terms", pd.DataFrame())


def glmm_model(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: binomial GLMM (lme4::glmer, Laplace) of ``correct ~ u + e + u·e`` with random intercepts for
    threshold, the query's noun and the prompt pair (both conditions of one prompt), and an uncorrelated random
    slope of upward by threshold; p-values by likelihood-ratio tests of nested models (χ², 1 df), Wald CIs.

    Random terms whose variance is estimated at 0 (a singular fit) are dropped one round at a time and the model
    refitted, each drop reported in ``note``; a fit that stays singular or does not converge (after lme4's
    restart from its own estimates) is kept but marked ``valid=False``. Empty when R with lme4 is not installed.
    """
    from ...rbridge import RError, r_available

    if not r_available("lme4"):
        return pd.DataFrame()
    data = glmm_input(df)
    rows = []
    try:
        info, terms = run_glmm(data)
    except RError as err:
        return pd.DataFrame([{"model": m, "test": "glmm_lrt", "valid": False, "note": f"lme4 failed: {err}"}
                             for m in df["model"].unique()])
    info = info.set_index("unit")
    for model, g in df.groupby("model", sort=False):
        i = info.loc[str(model)]
        conditions = list(dict.fromkeys(g["condition"]))
        _, _, notes = _design(g)
        base = {"model": model, "test": "glmm_lrt", "formula": i["formula"], "random_effects": i["random"],
                "random_sd": i["sd"], "n": len(g), "n_thresholds": _cluster(g).nunique()}
        fit_note = "" if pd.isna(i["note"]) else str(i["note"])
        t = terms[terms["unit"] == str(model)] if len(terms) else terms
        if t.empty:
            rows.append({**base, "valid": False, "note": "; ".join(filter(None, notes + [fit_note, "no term to test"]))})
        for r in t.itertuples(index=False):
            sep = SEPARATION if abs(r.estimate) > 8 else ""
            note = "; ".join(filter(None, [*notes, fit_note, "" if pd.isna(r.note) else str(r.note), sep]))
            rows.append({**base, "term": TERM_NAMES[r.key], "condition": _term_condition(r.key, conditions),
                         "estimate": r.estimate, "se": r.se, "ci_low": r.estimate - 1.96 * r.se,
                         "ci_high": r.estimate + 1.96 * r.se, "statistic": r.chisq, "df": r.df, "p": r.p,
                         "p_wald": r.p_wald, "valid": bool(r.valid) and not sep, "meaning": TERM_NOTES[r.key],
                         "note": note})
    return pd.DataFrame(rows)


def mixed_model(df: pd.DataFrame, use_r: bool = True) -> pd.DataFrame:
    """Per model: the headline mixed-effects test and its pure-Python counterpart, one row per model × test × term.

    ``glmm_lrt`` (lme4 through R, when installed and ``use_r``) is the headline; ``gee_bias_reduced`` is always
    computed and is the headline where R is absent or the GLMM has no valid fit. ``headline`` marks the row to report. Coefficients are log
    odds; ``odds_ratio`` and its CI are their exponentials. ``upward`` (concept learning) is the gap;
    ``upward:explicit`` < 0 means stating the concept shrinks it.
    """
    parts = [glmm_model(df) if use_r else pd.DataFrame(), gee_model(df)]
    out = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else pd.DataFrame()
    if out.empty:
        return pd.DataFrame(columns=["model", "test", "term", "condition", "estimate", "p", "valid", "headline", "note"])
    for col in ("term", "condition", "meaning", "estimate", "se", "ci_low", "ci_high", "statistic", "df", "p"):
        if col not in out:
            out[col] = np.nan if col not in ("term", "condition", "meaning") else None
    out["odds_ratio"] = np.exp(out["estimate"].astype(float))
    out["or_ci_low"], out["or_ci_high"] = np.exp(out["ci_low"].astype(float)), np.exp(out["ci_high"].astype(float))
    usable = (out["test"] == "glmm_lrt") & out["valid"].astype(bool) & out["term"].map(lambda t: isinstance(t, str))
    has_glmm = usable.groupby(out["model"]).transform("any")  # a failed or invalid GLMM hands the headline to the GEE
    out["headline"] = np.where(has_glmm, out["test"] == "glmm_lrt", out["test"] == "gee_bias_reduced")
    out["note"] = out["note"].fillna("")
    out["meaning"] = out["meaning"].fillna("")
    return out


def mcnemar_conditions(df: pd.DataFrame) -> pd.DataFrame:
    """Concept learning vs explicit on the same items (matched by pair_id): exact McNemar test per concept,
    Holm over the concepts of a model (``p_holm``)."""
    rows = []
    for (model, concept), g in df.groupby(["model", "concept"], sort=False):
        wide = g.pivot_table(index="pair_id", columns="condition", values="correct", aggfunc="first")
        if not {"concept_learning", "explicit"}.issubset(wide.columns):
            continue
        wide = wide.dropna().astype(bool)
        a, b = wide["concept_learning"], wide["explicit"]
        table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
        rows.append({"model": model, "concept": concept, "n_pairs": len(wide), "acc_concept_learning": a.mean(),
                     "acc_explicit": b.mean(), "only_cl_correct": table[0][1], "only_explicit_correct": table[1][0],
                     "p_mcnemar": float(mcnemar(table, exact=True).pvalue)})
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm"] = out.groupby("model")["p_mcnemar"].transform(lambda s: holm(s.to_numpy()))
    return out


def signal_detection(df: pd.DataFrame) -> pd.DataFrame:
    """Yes-rate, hit rate (TPR), correct-rejection rate (TNR), d′ and criterion c per model × condition × concept.

    Rates use the log-linear correction ((k + 0.5) / (n + 1)) so d′ stays finite at 0% or 100%; ``d_prime_var``
    is the delta-method variance (Gourevitch & Galanter) used for the fixed-threshold SE of the d′ gap.
    """
    rows = []
    for (model, condition, concept), g in df.groupby(["model", "condition", "concept"], sort=False):
        pos, neg = g[g["label"]], g[~g["label"]]
        h = (pos["pred_yes"].sum() + 0.5) / (len(pos) + 1)
        f = (neg["pred_yes"].sum() + 0.5) / (len(neg) + 1)
        zh, zf = sps.norm.ppf(h), sps.norm.ppf(f)
        var = h * (1 - h) / ((len(pos) + 1) * sps.norm.pdf(zh) ** 2) + f * (1 - f) / ((len(neg) + 1) * sps.norm.pdf(zf) ** 2)
        rows.append({"model": model, "condition": condition, "concept": concept,
                     **{c: g[c].iloc[0] for c in CONCEPT_KEYS}, "yes_rate": g["pred_yes"].mean(),
                     "tpr": pos["pred_yes"].mean() if len(pos) else np.nan,
                     "tnr": 1 - neg["pred_yes"].mean() if len(neg) else np.nan,
                     "d_prime": zh - zf, "d_prime_var": var, "criterion": -(zh + zf) / 2})
    return pd.DataFrame(rows)


def dprime_gap(sdt: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Upward minus downward d′ per model and condition: the gap with response bias factored out, with inference.

    ``dprime_gap`` averages all up and all down concepts. Inference uses the matched thresholds: the mean of the
    per-threshold differences with a t(K−1) CI and a sign-flip test (about thresholds in general, the same logic
    as the accuracy gap), and ``se_delta``, the delta-method SE that treats the thresholds as fixed (for reference:
    like the CMH test it ignores how the gap varies between thresholds).
    """
    rows = []
    for (model, condition), g in sdt.groupby(["model", "condition"], sort=False):
        up, down = g[g.monotonicity == "upward"], g[g.monotonicity == "downward"]
        if not (len(up) and len(down)):
            continue
        row = {"model": model, "condition": condition, "dprime_up": up["d_prime"].mean(),
               "dprime_down": down["d_prime"].mean(), "dprime_gap": up["d_prime"].mean() - down["d_prime"].mean(),
               "criterion_up": up["criterion"].mean(), "criterion_down": down["criterion"].mean()}
        key = ["family", "threshold"]
        both = up.merge(down, on=key, suffixes=("_up", "_down"))
        diff = (both["d_prime_up"] - both["d_prime_down"]).to_numpy()
        mean, se, lo, hi = t_interval(diff)
        p, exact = sign_flip_test(diff, seed=seed)
        se_delta = float(np.sqrt((both["d_prime_var_up"] + both["d_prime_var_down"]).sum()) / len(both)) if len(both) else np.nan
        row.update(n_thresholds=len(both), dprime_gap_matched=mean, se=se, ci_low=lo, ci_high=hi, p_signflip=p,
                   signflip_exact=exact, se_delta=se_delta)
        rows.append(row)
    return pd.DataFrame(rows)


def difficulty(df: pd.DataFrame, bins: int = 5) -> pd.DataFrame:
    """Accuracy by the query's distance from the threshold (quantile bins within family), upward vs downward."""
    rows = []
    for (model, condition, family), g in df.groupby(["model", "condition", "family"], sort=False):
        q = pd.qcut(g["query_distance"], min(bins, g["query_distance"].nunique()), duplicates="drop")
        for (interval, mono), d in g.groupby([q, "monotonicity"], observed=True):
            k, n = int(d["correct"].sum()), len(d)
            lo, hi = wilson(k, n)
            rows.append({"model": model, "condition": condition, "family": family, "monotonicity": mono,
                         "distance_mid": float(interval.mid), "distance_bin": str(interval), "n": n,
                         "accuracy": k / n, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def calibration(df: pd.DataFrame) -> pd.DataFrame:
    """Mean Yes–No log-probability margin by true label, per model × condition × monotonicity."""
    return (df.groupby(["model", "condition", "monotonicity", "label"], sort=False)["margin"]
              .agg(mean_margin="mean", sd_margin="std", n="size").reset_index())


def records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """Every inferential result of the analysis tables as ``nbutils.stats.record`` dicts (``summary["records"]``).

    Estimates of the model-based, CMH and sign-flip rows are log odds (ratios); the bootstrap row is the accuracy
    gap; ``headline`` marks the mixed-effects test to report (lme4's GLMM where R is installed, else the GEE).
    """
    out = []

    def rows(name):
        return t[name].itertuples(index=False) if name in t and len(t[name]) else []

    for r in rows("mixed_model"):
        if isinstance(r.term, str):
            out.append(record(r.test, r.term, r.estimate, r.se, r.ci_low, r.ci_high, r.p, valid=r.valid,
                              note="; ".join(filter(None, [r.meaning, r.note])),
                              condition=r.condition if isinstance(r.condition, str) else None, model=r.model,
                              headline=bool(r.headline), statistic=r.statistic, df=r.df, odds_ratio=r.odds_ratio,
                              formula=r.formula, random_effects=r.random_effects))
        else:
            out.append(record(r.test, "(none)", valid=False, note=r.note, model=r.model, headline=bool(r.headline)))
    for r in rows("gap_pooled"):
        k = int(r.n_thresholds)
        few = "" if k >= 2 else "; one threshold: no variation between thresholds to test against"
        out.append(record("signflip_gap", "upward", r.log_or_mean, r.log_or_se, r.log_or_ci_low, r.log_or_ci_high,
                          r.p_signflip, valid=k >= 2, condition=r.condition, model=r.model, n_thresholds=k,
                          exact=bool(r.signflip_exact),
                          note="mean over thresholds of the up-vs-down log odds ratio; sign-flip test, t(K−1) CI" + few))
        out.append(record("cluster_bootstrap", "upward", r.gap, ci_low=r.gap_ci_low, ci_high=r.gap_ci_high,
                          valid=k >= 2, condition=r.condition, model=r.model, n_thresholds=k,
                          note="descriptive: accuracy gap, 95% percentile CI resampling thresholds (too narrow "
                               "with few thresholds: 9-12% false positives at 10 in calibration.json)" + few))
        log_or = np.log(r.or_mh) if r.or_mh > 0 else np.nan
        ci = [np.log(v) if v > 0 else np.nan for v in (r.or_mh_ci_low, r.or_mh_ci_high)]
        out.append(record("cmh", "upward", log_or, None, ci[0], ci[1], r.p_cmh, condition=r.condition,
                          model=r.model, odds_ratio=r.or_mh, p_holm_models=r.p_holm_models, n_thresholds=k,
                          note="fixed-threshold test (these thresholds only): Mantel-Haenszel log odds ratio, "
                               "CMH without continuity correction"))
        out.append(record("breslow_day", "upward", p=r.p_breslow_day, condition=r.condition, model=r.model,
                          valid=k >= 2, n_thresholds=k,
                          note="fixed-threshold test that the odds ratio is the same at every threshold"))
    for r in rows("gap_difference"):
        out.append(record("signflip_gap_difference", "upward:explicit", r.log_or_cl_minus_explicit, r.se, r.ci_low,
                          r.ci_high, r.p_signflip, valid=r.n_thresholds >= 2, model=r.model,
                          n_thresholds=int(r.n_thresholds), exact=bool(r.signflip_exact),
                          note="mean over thresholds of the log odds ratio under concept learning minus explicit "
                               "(> 0: the gap shrinks); sign-flip test, t(K−1) CI"))
    for r in rows("gap_by_threshold"):
        out.append(record("fisher", f"upward@{r.family}:{r.threshold}", r.gap, p=r.p_fisher, condition=r.condition,
                          model=r.model, p_holm=r.p_holm,
                          note="accuracy gap at this threshold only; Holm over the thresholds of a model and condition"))
    for r in rows("mcnemar"):
        out.append(record("mcnemar", f"explicit@{r.concept}", r.acc_explicit - r.acc_concept_learning, p=r.p_mcnemar,
                          model=r.model, p_holm=r.p_holm, n=int(r.n_pairs),
                          note="explicit minus concept-learning accuracy on the same prompts; exact McNemar, "
                               "Holm over the concepts of a model"))
    for r in rows("accuracy"):
        out.append(record("binomial", f"accuracy@{r.concept}", r.accuracy, None, r.ci_low, r.ci_high, r.p_binom,
                          condition=r.condition, model=r.model, p_holm=r.p_holm, n=int(r.n),
                          note="accuracy vs 0.5: exact binomial test, Wilson CI, Holm within the model"))
    for r in rows("dprime_gap"):
        k = int(r.n_thresholds)
        out.append(record("signflip_dprime_gap", "upward", r.dprime_gap_matched, r.se, r.ci_low, r.ci_high,
                          r.p_signflip, valid=k >= 2, condition=r.condition, model=r.model, n_thresholds=k,
                          se_delta=r.se_delta, exact=bool(r.signflip_exact),
                          note="mean over matched thresholds of d′ up − d′ down; sign-flip test, t(K−1) CI; "
                               "se_delta treats the thresholds as fixed"))
    return json_clean(out)


def summary(gaps: pd.DataFrame, mixed: pd.DataFrame, dgap: pd.DataFrame) -> dict:
    """The headline numbers per model and condition, for summary.json (every test is in ``records`` too)."""
    out: dict = {}
    for r in gaps.itertuples(index=False):
        entry = out.setdefault(r.model, {"conditions": {}})
        entry["conditions"][r.condition] = {
            "acc_up": r.acc_up, "acc_down": r.acc_down, "gap": r.gap, "gap_ci95": [r.gap_ci_low, r.gap_ci_high],
            "log_or_mean": r.log_or_mean, "p_signflip": r.p_signflip, "or_mh": r.or_mh, "p_cmh": r.p_cmh,
            "p_holm_models": r.p_holm_models, "n_thresholds": r.n_thresholds}
    for r in dgap.itertuples(index=False):
        out.setdefault(r.model, {"conditions": {}})["conditions"].setdefault(r.condition, {}).update(
            dprime_gap=r.dprime_gap, dprime_gap_p_signflip=r.p_signflip)
    for model, g in mixed.groupby("model"):
        entry = out.setdefault(model, {"conditions": {}})
        head = g[g["headline"] & g["term"].map(lambda x: isinstance(x, str))]
        entry["mixed_model"] = {
            "test": head["test"].iloc[0] if len(head) else None,
            "terms": [{k: getattr(t, k, None) for k in ("term", "condition", "estimate", "se", "odds_ratio", "or_ci_low",
                                                        "or_ci_high", "p", "valid")} for t in head.itertuples(index=False)]}
        entry["notes"] = sorted({n for n in g["note"].dropna() if n})
    return json_clean(out)
