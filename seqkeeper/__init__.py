"""seqkeeper: ordered, deduplicated, trustworthy topics from unreliable streams.

This package is the imperative shell (CLI, settings, embedded broker, demo,
verifier). The patterns live in ``processors``, storage in ``state``, the
Faust wiring in ``topologies`` and the batch side in ``spark_sink``.
"""

__version__ = "0.1.0"
