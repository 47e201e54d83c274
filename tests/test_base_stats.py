"""The base band's shared inference against its reference implementations."""
from __future__ import annotations

import numpy as np
from statsmodels.stats.multitest import multipletests

from nbutils.stats import holm


def test_holm_equals_statsmodels_exactly_with_ties_nans_and_caps():
    rng = np.random.default_rng(0)  # few reference calls: each of statsmodels' Holm calls costs a gc.collect()
    for m in (1, 2, 3, 7, 7, 40, 40):
        p = rng.choice([rng.random(), 0.01, 0.04, 0.5, 1.0], m) if m > 2 else rng.random(m)  # ties and exact 1s
        p = np.where(rng.random(m) < 0.5, rng.random(m) ** 3, p)
        np.testing.assert_array_equal(holm(p), multipletests(p, method="holm")[1])
    with_nan = np.array([0.01, np.nan, 0.04, 0.03, np.nan])
    out = holm(with_nan)
    assert np.isnan(out[[1, 4]]).all()
    np.testing.assert_array_equal(out[[0, 2, 3]], multipletests(with_nan[[0, 2, 3]], method="holm")[1])
    assert np.isnan(holm([np.nan, np.nan])).all() and holm([]).shape == (0,)
    assert holm([0.9, 0.8]).max() == 1.0, "capped at 1"


def test_a_standard_error_at_the_square_root_of_machine_epsilon_is_a_singular_fit():
    """A sandwich variance that is zero in exact arithmetic comes out near 1e-16 on some hosts' BLAS kernels, so its
    standard error is near 1e-8: that is a singular fit, while the smallest real standard error of a log-odds
    estimate from a million prompts (about 2e-3) is not."""
    from nbutils.stats import fit_problems

    for se in (0.0, 1.7e-8, 3e-7, float("nan")):
        assert any("singular" in p for p in fit_problems(0.5, se, -1.0, 2.0)), se
    assert not fit_problems(0.5, 2e-3, 0.496, 0.504)
    assert not fit_problems(-2.0, 0.4, -2.8, -1.2)
