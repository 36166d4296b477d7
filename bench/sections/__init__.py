"""The bench's sections, a module each (``seqkeeper bench --only <name>``):
``run(bench, tally)`` measures on the rig (:class:`seqkeeper.bench.rig.Bench`)
and adds its figures and ratios to the run's :class:`~seqkeeper.bench.sections.tally.Tally`;
the measurements only it makes live beside it. :mod:`seqkeeper.bench.harness`
runs them in order."""
