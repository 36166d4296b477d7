"""The tooling that proves seqkeeper's contract: the workloads, the verifier,
the chaos runner. Used by the ``verify``, ``chaos`` and ``demo`` commands and
by the tests; the worker never imports it."""
