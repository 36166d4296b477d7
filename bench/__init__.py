"""``seqkeeper bench``: seqkeeper against its baselines, side by side."""
