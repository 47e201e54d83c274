
suppressPackageStartupMessages({library(lme4); library(lmerTest)})
SINGULAR <- "boundary (singular) fit: see help('isSingular')"
CFG <- nb_in("config")
MODE <- as.character(CFG$random[1])
COV <- as.logical(CFG$covariate[1])
RAND <- c(root = "(1 | root)", context = "(0 + c | root)", form = "(0 + f | root)", `context × form` = "(0 + cf | root)",
          item = "(1 | item)")
CORR <- "(1 + c + f + cf | root) + (1 | item)"
FIXED <- if (COV) "y ~ c + f + cf + tok" else "y ~ c + f + cf"
fit1 <- function(random, d) {
  msgs <- character(0)
  m <- withCallingHandlers(
    tryCatch(lmerTest::lmer(as.formula(paste(FIXED, "+", random)), data = d, REML = TRUE),
             error = function(e) { msgs <<- c(msgs, paste("error:", conditionMessage(e))); NULL }),
    warning = function(w) { msgs <<- c(msgs, conditionMessage(w)); invokeRestart("muffleWarning") },
    message = function(w) { msgs <<- c(msgs, trimws(conditionMessage(w))); invokeRestart("muffleMessage") })
  conv <- if (is.null(m)) msgs else unique(c(setdiff(m@optinfo$conv$lme4$messages, SINGULAR),
                                              grep("converge|error|failure", msgs, value = TRUE)))
  list(m = m, random = random, singular = !is.null(m) && isSingular(m, tol = 1e-4), conv = conv)
}
sds <- function(m) {
  vc <- as.data.frame(VarCorr(m))
  vc <- vc[vc$grp != "Residual" & is.na(vc$var2), ]
  key <- ifelse(vc$grp == "item", "item", ifelse(vc$var1 == "(Intercept)", "root",
         ifelse(vc$var1 == "c", "context", ifelse(vc$var1 == "f", "form", "context × form"))))
  stats::setNames(vc$sdcor, key)
}
why <- function(r) paste(c(if (is.null(r$m)) "failed" else if (r$singular) "singular", r$conv), collapse = ": ")
ok <- function(r) !is.null(r$m) && !r$singular && !length(r$conv)
one_unit <- function(d) {
  notes <- character(0)
  active <- names(RAND)
  if (length(unique(d$item)) == length(unique(d$root))) active <- setdiff(active, "item")
  if (MODE == "auto") {
    r <- fit1(CORR, d)
    if (!ok(r)) {
      notes <- c(notes, sprintf("correlated %s %s: uncorrelated slopes", CORR, why(r)))
      r <- NULL
    }
  } else r <- NULL
  if (is.null(r)) repeat {
    r <- fit1(paste(RAND[active], collapse = " + "), d)
    if (ok(r) || MODE != "auto" || is.null(r$m) || length(active) <= 1) break
    s <- sds(r$m)[active]
    zero <- names(s)[s < 1e-4 * sigma(r$m)]
    if (!length(zero)) zero <- names(which.min(s))
    notes <- c(notes, sprintf("%s: dropped %s (SD %.2g)", why(r), paste(RAND[zero], collapse = " + "), min(s[zero])))
    active <- setdiff(active, zero)
  }
  valid <- ok(r)
  info <- data.frame(random = r$random, singular = r$singular, converged = !length(r$conv), valid = valid,
                     satterthwaite = !is.null(r$m) && inherits(r$m, "lmerModLmerTest"),
                     steps = paste(notes, collapse = "; "),
                     note = paste(c(if (r$singular) "singular fit", r$conv), collapse = "; "),
                     sd = if (is.null(r$m)) "" else paste(sprintf("%s %.3g", c(names(sds(r$m)), "residual"),
                                                                  c(sds(r$m), sigma(r$m))), collapse = ", "))
  if (is.null(r$m)) return(list(info = info, coefs = NULL))
  L <- as.matrix(nb_in("contrasts")[, -(1:2)])
  lab <- nb_in("contrasts")[, 1:2]
  if (!COV) L <- L[lab$term != "n_tokens", 1:4, drop = FALSE] else L <- L[, 1:5, drop = FALSE]
  if (!COV) lab <- lab[lab$term != "n_tokens", ]
  if (info$satterthwaite) {
    ct <- lmerTest::contest(r$m, L, joint = FALSE, ddf = "Satterthwaite")
    co <- data.frame(estimate = ct$Estimate, se = ct[["Std. Error"]], df = ct$df, stat = ct[["t value"]],
                     p = ct[["Pr(>|t|)"]], ci_low = ct$lower, ci_high = ct$upper)
  } else {
    b <- fixef(r$m); V <- as.matrix(vcov(r$m))
    est <- as.vector(L %*% b); se <- sqrt(diag(L %*% V %*% t(L)))
    co <- data.frame(estimate = est, se = se, df = NA, stat = est / se, p = 2 * pnorm(-abs(est / se)),
                     ci_low = est - qnorm(.975) * se, ci_high = est + qnorm(.975) * se)
  }
  list(info = info, coefs = cbind(lab, co))
}
nb_per_unit(nb_in("lmm"), one_unit, "coefs")
