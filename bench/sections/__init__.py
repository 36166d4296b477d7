"""The bench's sections, a module each (``seqkeeper bench --only <name>``)."""
