"""Firth's penalised logistic regression (Jeffreys-prior penalty): finite estimates where the data separate.

A logistic model whose cells are answered all right or all wrong has no finite maximum-likelihood estimate, and a
GLMM or GEE fitted to it reports an estimate of ±20 log-odds with a CI over millions of orders of magnitude. Firth's
penalty (½ log |I(β)|, Heinze & Schemper 2002) removes the first-order bias of the estimate and keeps it finite
under complete separation; its tests are penalised likelihood-ratio tests and its CIs profile-penalised-likelihood
intervals (the Wald ones are poor there), as R's ``logistf`` computes them. The estimates and standard errors equal
R's ``brglm2`` (mean bias reduction, the same estimator for the logit link); a test checks them on the same data.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps
from scipy.special import expit

CHI2_95 = float(sps.chi2.ppf(0.95, 1))


@dataclass(frozen=True)
class FirthFit:
    """A penalised fit: coefficients, their covariance (the inverse Fisher information at the estimate), the
    penalised log-likelihood, and the data it was fitted to (for the tests and intervals)."""

    params: np.ndarray
    cov: np.ndarray
    loglik: float
    X: np.ndarray
    y: np.ndarray
    names: tuple[str, ...]
    converged: bool

    @property
    def se(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))


def _penalised(X: np.ndarray, y: np.ndarray, beta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(penalised log-likelihood, modified score, Fisher information) at ``beta``."""
    eta = X @ beta
    p = expit(eta)
    w = np.clip(p * (1 - p), 1e-300, None)
    info = X.T @ (X * w[:, None])
    sign, logdet = np.linalg.slogdet(info)
    ll = float(np.sum(y * eta - np.logaddexp(0, eta)))
    if sign <= 0:
        return -np.inf, np.zeros_like(beta), info
    h = w * np.einsum("ij,ij->i", X @ np.linalg.inv(info), X)  # leverages of the weighted hat matrix
    score = X.T @ (y - p + h * (0.5 - p))
    return ll + 0.5 * logdet, score, info


def _maximise(X: np.ndarray, y: np.ndarray, free: np.ndarray, beta: np.ndarray, max_iter: int = 100,
              tol: float = 1e-9) -> tuple[np.ndarray, float, bool]:
    """Newton–Raphson on the penalised likelihood over the ``free`` coefficients (the others stay fixed), with step
    halving and steps capped at 5 log-odds, as ``logistf`` does."""
    beta = beta.astype(float).copy()
    ll, score, info = _penalised(X, y, beta)
    for _ in range(max_iter):
        try:
            step = np.linalg.solve(info[np.ix_(free, free)], score[free])
        except np.linalg.LinAlgError:
            return beta, ll, False
        big = np.max(np.abs(step)) if step.size else 0.0
        if big > 5:
            step *= 5 / big
        for _ in range(30):
            trial = beta.copy()
            trial[free] += step
            ll_t, score_t, info_t = _penalised(X, y, trial)
            if ll_t >= ll - 1e-12:
                break
            step /= 2
        else:
            return beta, ll, False
        beta, done = trial, max(np.max(np.abs(step)) if step.size else 0.0, np.max(np.abs(score_t[free]), initial=0.0))
        ll, score, info = ll_t, score_t, info_t
        if done < tol:
            return beta, ll, True
    return beta, ll, False


def firth_fit(X, y, names=None) -> FirthFit:
    """Fit ``y`` (0/1) on the design matrix ``X`` (an intercept column included by the caller) with Firth's
    penalty. Raises ValueError when ``X`` has fewer rows than columns or is not of full column rank."""
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    n, k = X.shape
    if n <= k or np.linalg.matrix_rank(X) < k:
        raise ValueError(f"X: the design matrix must have full column rank and more rows than columns ({n}×{k})")
    beta, ll, ok = _maximise(X, y, np.arange(k), np.zeros(k))
    _, _, info = _penalised(X, y, beta)
    return FirthFit(beta, np.linalg.inv(info), ll, X, y, tuple(names or (f"x{i}" for i in range(k))), ok)


def profile(fit: FirthFit, j: int, value: float) -> float:
    """The penalised log-likelihood maximised over every coefficient but the ``j``-th, held at ``value``."""
    free = np.array([i for i in range(len(fit.params)) if i != j], dtype=int)
    start = fit.params.copy()
    start[j] = value
    return _maximise(fit.X, fit.y, free, start)[1]


def lr_test(fit: FirthFit, j: int, null: float = 0.0) -> tuple[float, float]:
    """Penalised likelihood-ratio test that coefficient ``j`` equals ``null``: (χ² on 1 df, p)."""
    chisq = max(0.0, 2 * (fit.loglik - profile(fit, j, null)))
    return chisq, float(sps.chi2.sf(chisq, 1))


def profile_ci(fit: FirthFit, j: int, level: float = 0.95) -> tuple[float, float]:
    """Profile-penalised-likelihood CI of coefficient ``j``: where twice the drop from the maximum crosses the χ²₁
    quantile (NaN on a side where it does not within 40 log-odds)."""
    crit = float(sps.chi2.ppf(level, 1))
    est, se = float(fit.params[j]), float(fit.se[j])

    def gap(b):
        return 2 * (fit.loglik - profile(fit, j, b)) - crit

    out = []
    for side in (-1, 1):
        step, near = max(se, 0.1), est
        far = est + side * step
        while gap(far) < 0:
            near, far, step = far, far + side * step, step * 2
            if abs(far - est) > 40:
                out.append(float("nan"))
                break
        else:
            out.append(float(optimize.brentq(gap, near, far, xtol=1e-7)) if near != far else est)
    return out[0], out[1]


def term_test(X, y, names, term: str, null: float = 0.0, ci: bool = True) -> dict:
    """One coefficient of a Firth fit as a record's numbers: estimate, SE, profile CI (NaN without ``ci``: the
    calibration needs only p, and the CI excludes ``null`` exactly when p < .05), penalised LR χ² and p."""
    fit = firth_fit(X, y, names)
    j = list(fit.names).index(term)
    chisq, p = lr_test(fit, j, null)
    lo, hi = profile_ci(fit, j) if ci else (float("nan"), float("nan"))
    return {"estimate": float(fit.params[j]), "se": float(fit.se[j]), "ci_low": lo, "ci_high": hi,
            "statistic": chisq, "p": p, "converged": fit.converged}
