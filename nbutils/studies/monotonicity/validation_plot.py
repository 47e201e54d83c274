"""The validation study's power curve: detection rate and gap against the adapter's strength, the decoy beside."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def figure(tab: pd.DataFrame, path, reliable: float) -> Path:
    """Detection rate (Wilson CI) and gap (CI across seeds) against the dose; the decoy beside the ladder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ladder, decoy = tab[tab["arm"] == "ladder"], tab[tab["arm"] == "decoy"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, y, lo, hi, label in ((a, "detection_rate", "detection_ci_low", "detection_ci_high", "detection rate"),
                                 (b, "gap", "gap_ci_low", "gap_ci_high", "gap (upward − downward), points")):
        scale = 100 if y == "gap" else 1
        for part, style, name in ((ladder, "o-", "control at strength s"), (decoy, "s", "decoy (balanced)")):
            if part.empty:
                continue
            v, l, h = (part[c].to_numpy(float) * scale for c in (y, lo, hi))
            x = part["dose"].to_numpy(float) + (0.03 if name.startswith("decoy") else 0)
            ax.errorbar(x, v, yerr=[np.nan_to_num(v - l), np.nan_to_num(h - v)], fmt=style, capsize=3, label=name)
        ax.set_xlabel("adapter strength s")
        ax.set_ylabel(label)
    a.axhline(reliable, color="grey", lw=0.8, ls=":")
    a.set_ylim(-0.05, 1.05)
    b.axhline(0, color="grey", lw=0.8)
    a.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
