"""nbutils: the thin module behind the likelihood-probe notebooks (generate → score → analyze)."""
__version__ = "0.1.0"
