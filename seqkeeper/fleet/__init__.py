"""The fleet: what ``seqkeeper demo``, ``seqkeeper chaos`` and ``seqkeeper
bench`` (and the integration tests) use to run and watch worker processes
on a broker, in one place.

* :mod:`~seqkeeper.fleet.processes` — a worker (or any child) process:
  start it with its settings as its environment, ``kill -9`` it, stop it.
* :mod:`~seqkeeper.fleet.publishing` — input: all at once, or in the
  background while faults happen.
* :mod:`~seqkeeper.fleet.offsets` — a topic's end per partition, aware of
  exactly-once (commit markers and aborted writes are not output).
* :mod:`~seqkeeper.fleet.poll` — one loop for every wait.
* :mod:`~seqkeeper.fleet.probes` — how long until output flows again.
* :mod:`~seqkeeper.fleet.machine` — the machine a run ran on, and when.

It imports nothing of the demo, the verification or the bench: they import it.
"""
