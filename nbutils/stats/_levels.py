"""The levels every analysis reads its tests at, spelled once: α and the bootstrap's default number of resamples."""
from __future__ import annotations

N_BOOT = 2000  # bootstrap resamples, wherever a study draws them
N_BOOT_MIN = 1  # the fewest an analysis or a notebook takes
ALPHA = 0.05  # the level a test is read at (the results in words, the cue profile's familywise level)
