
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
AXES <- c("template", "phrase", "answer_words")  # prompt-variant axes: intercept and upward slope by variant
for (a in AXES) RAND[c(a, paste0(a, "_slope"))] <- c(sprintf("(1 | %s)", a), sprintf("(0 + uc | %s)", a))
sds <- function(m) {
  vc <- as.data.frame(VarCorr(m))
  g <- sub("\\.[0-9]+$", "", vc$grp)  # lme4 names a second term of one grouping factor "cluster.1"
  g[g == "cluster"] <- "threshold"
  slope <- !is.na(vc$var1) & vc$var1 == "uc"
  key <- ifelse(slope, ifelse(g == "threshold", "slope", paste0(g, "_slope")), g)
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
  for (a in intersect(AXES, names(d))) if (length(unique(d[[a]])) > 1) active <- c(active, a, if (has_u) paste0(a, "_slope"))
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
nb_per_unit(nb_in("glmm"), one_unit, "terms")
