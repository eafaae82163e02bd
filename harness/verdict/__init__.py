"""From outputs to a verdict: ROUGE-L, the per-position statistics, the fault signatures and the
failure texts."""
