# The model comparison's GLMM (model_comparison.py): correct ~ u * m with a random intercept per prompt, its u:m term
# tested by a likelihood-ratio test against correct ~ u + m; one fit per unit (a comparison x condition).
suppressPackageStartupMessages(library(lme4))
ctrl <- glmerControl(optimizer = "bobyqa", optCtrl = list(maxfun = 1e5))
fit <- function(f, d) {
  msgs <- character(0)
  m <- withCallingHandlers(tryCatch(glmer(f, data = d, family = binomial, control = ctrl),
                                    error = function(e) { msgs <<- c(msgs, conditionMessage(e)); NULL }),
                           warning = function(w) { msgs <<- c(msgs, conditionMessage(w)); invokeRestart("muffleWarning") },
                           message = function(w) invokeRestart("muffleMessage"))
  conv <- if (is.null(m)) c("no fit", msgs) else setdiff(m@optinfo$conv$lme4$messages,
                                                         "boundary (singular) fit: see help('isSingular')")
  list(m = m, conv = unique(c(conv, grep("converge|failure", msgs, value = TRUE))))
}
one <- function(d) {
  full <- fit(correct ~ u * m + (1 | prompt), d)
  red <- fit(correct ~ u + m + (1 | prompt), d)
  ok <- !is.null(full$m) && !is.null(red$m) && !length(full$conv) && !length(red$conv)
  note <- paste(c(full$conv, red$conv), collapse = "; ")
  if (is.null(full$m)) return(list(info = data.frame(valid = FALSE, note = note), terms = NULL))
  co <- summary(full$m)$coefficients
  chisq <- if (is.null(red$m)) NA else max(0, 2 * (as.numeric(logLik(full$m)) - as.numeric(logLik(red$m))))
  sd <- as.data.frame(VarCorr(full$m))$sdcor[1]
  list(info = data.frame(valid = ok, note = note),
       terms = data.frame(estimate = co["u:m", 1], se = co["u:m", 2], chisq = chisq, sd_prompt = sd,
                          p = stats::pchisq(chisq, 1, lower.tail = FALSE)))
}
nb_per_unit(nb_in("cmp"), one, "terms")
