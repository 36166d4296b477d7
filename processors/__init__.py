"""Pure, deterministic state machines: one module per messaging pattern.

Nothing here touches Kafka, Faust, RocksDB or the clock: state, the message
and the current time come in as arguments; new state and emissions go out.
"""
