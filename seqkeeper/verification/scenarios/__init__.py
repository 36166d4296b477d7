"""The chaos scenarios, a module each: ``run(chaos)`` plays the scenario on
a :class:`~seqkeeper.verification.scenarios.stage.Stage` and returns its
:class:`~seqkeeper.verification.outcome.Outcome` (titled as in
:data:`~seqkeeper.verification.outcome.TITLES`).

A new scenario: a module here, its name in ``SCENARIOS`` and its title in
``TITLES`` (:mod:`seqkeeper.verification.outcome`; in ``BOTH_GUARANTEES``
if it runs under each guarantee), and ``scenario_<name> = <module>.run`` in
:class:`seqkeeper.verification.chaos.Chaos`."""
