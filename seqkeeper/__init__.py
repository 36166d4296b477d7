"""seqkeeper: ordered, deduplicated, trustworthy topics from unreliable streams.

The one import name of the project. Users' command handlers import
:class:`Registry`, :class:`Command`, :class:`Event`, :class:`DomainError`
and :class:`End` (a new state that ends the entity) from here, and the
worker loads them by name (``--handlers mypkg.mod:registry``).
An ordered processor (``--processor mypkg.mod:fn``) is a function of
``(state, message)``; it sees :class:`Message` (a gap given up as type
:data:`GAP_SKIPPED`) and may return :class:`Output` records.

Its parts, from the bottom up:

- :mod:`seqkeeper.processors`: the patterns, pure state machines (no Kafka,
  no Faust, no clock);
- :mod:`seqkeeper.settings`: every setting, declared once;
- :mod:`seqkeeper.state`: storage and codecs;
- :mod:`seqkeeper.adapter`: every Faust and aiokafka override;
- :mod:`seqkeeper.runtime`: the processing and commit protocol;
- :mod:`seqkeeper.topologies`: the two workers' topologies, wired by the runtime;
- :mod:`seqkeeper.spark_sink`: the batch side (Parquet, audit, replay);
- the shell: the CLI (:mod:`seqkeeper.cli`), the worker process, brokers,
  the demo, and the verification tooling (:mod:`seqkeeper.verification`);
  :mod:`seqkeeper.bench` is ``seqkeeper bench``.
"""

from seqkeeper.processors.command import Command, DomainError, End, Event, Registry
from seqkeeper.processors.processor import GAP_SKIPPED, Message, Output, command_message

__version__ = "0.1.0"

#: The public API: what a user's command handlers and ordered processors import.
__all__ = [
    "GAP_SKIPPED",
    "Command",
    "DomainError",
    "End",
    "Event",
    "Message",
    "Output",
    "Registry",
    "__version__",
    "command_message",
]
