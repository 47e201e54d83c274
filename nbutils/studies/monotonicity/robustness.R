suppressPackageStartupMessages(library(lme4))
ctrl <- glmerControl(optimizer = "bobyqa", optCtrl = list(maxfun = 1e5))
SINGULAR <- "boundary (singular) fit: see help('isSingular')"
RAND <- c(noun = "(1 | noun)")
fit <- function(fixed, active, d) {
  msgs <- character(0)
  f <- stats::as.formula(paste(c(fixed, RAND[active]), collapse = " + "))
  m <- withCallingHandlers(tryCatch(
      if (length(active)) glmer(f, data = d, family = binomial, control = ctrl) else glm(f, data = d, family = binomial),
      error = function(e) { msgs <<- c(msgs, paste("error:", conditionMessage(e))); NULL }),
    warning = function(w) { msgs <<- c(msgs, conditionMessage(w)); invokeRestart("muffleWarning") },
    message = function(w) { msgs <<- c(msgs, trimws(conditionMessage(w))); invokeRestart("muffleMessage") })
  conv <- if (is.null(m)) "no fit" else if (inherits(m, "merMod")) setdiff(m@optinfo$conv$lme4$messages, SINGULAR)
          else if (!m$converged) "glm did not converge" else character(0)
  conv <- unique(c(conv, grep("converge|error|failure", msgs, value = TRUE)))
  list(m = m, singular = !is.null(m) && inherits(m, "merMod") && isSingular(m, tol = 1e-4), conv = conv)
}
EST <- function(m) if (inherits(m, "merMod")) fixef(m) else coef(m)
one_unit <- function(d) {
  d$variant <- factor(d$variant)
  v <- nlevels(d$variant)
  # the threshold-specific gaps are fixed effects (thresholds are a nuisance here); the noun a random intercept
  base <- if (length(unique(d$cluster)) > 1) "correct ~ cluster * u + variant" else "correct ~ u + variant"
  active <- if (length(unique(d$noun)) > 1) "noun" else character(0)
  notes <- character(0)
  full <- fit(paste(base, "+ u:variant"), active, d)
  if (!is.null(full$m) && full$singular) {  # the noun's variance estimated at zero: a plain logistic model
    notes <- "singular fit: dropped (1 | noun)"
    active <- character(0)
    full <- fit(paste(base, "+ u:variant"), active, d)
  }
  red <- fit(base, active, d)
  chisq <- if (is.null(full$m) || is.null(red$m)) NA else 2 * (as.numeric(logLik(full$m)) - as.numeric(logLik(red$m)))
  problems <- c(if (length(full$conv)) paste("full model:", full$conv), if (length(red$conv)) paste("reduced model:", red$conv),
                if (!is.na(chisq) && chisq < -1e-3) "reduced model fits better than the full one: optimizer failure",
                if (full$singular) "singular fit",
                if (!is.null(full$m) && any(!is.finite(EST(full$m)) | abs(EST(full$m)) > 8))
                  "an estimate beyond ±8 log-odds: (quasi-)complete separation, the test is not reliable")
  info <- data.frame(random = paste(RAND[active], collapse = " + "), chisq = if (is.na(chisq)) NA else max(chisq, 0),
                     df = v - 1, p = if (is.na(chisq)) NA else stats::pchisq(max(chisq, 0), v - 1, lower.tail = FALSE),
                     valid = !is.na(chisq) && !length(problems), note = paste(c(notes, problems), collapse = "; "))
  list(info = info, none = NULL)
}
nb_per_unit(nb_in("het"), one_unit, "none")
