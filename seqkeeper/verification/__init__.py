"""The tooling that proves seqkeeper's contract: the workloads, the verifier,
the chaos runner (its scenarios in :mod:`seqkeeper.verification.scenarios`).
Used by the ``verify``, ``chaos`` and ``demo`` commands and by the tests; the
worker never imports it, nor it the demo (it runs workers through
:mod:`seqkeeper.fleet`)."""
