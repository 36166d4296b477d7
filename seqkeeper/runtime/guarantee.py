"""Whether a broker has transactions: the question behind the processing
guarantee (exactly-once where the broker can, the write-ahead outbox where
it cannot).

A broker may advertise the transactional API versions and still not
implement them: the embedded broker lists InitProducerId but answers it
with UNKNOWN_SERVER_ERROR, for a transactional producer and an idempotent
one alike. So the question is asked the only way that tells: a
transactional producer starts (InitProducerId) or does not. Only "not
implemented" answers mean no; an authorization error, or a broker that
cannot be reached, is raised as it is — falling back to at-least-once
there would weaken the guarantee because of a misconfiguration.
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaProducer
from aiokafka.errors import UnknownError, UnsupportedVersionError

#: The answers that mean "this broker has no transactions".
NOT_IMPLEMENTED = (UnknownError, UnsupportedVersionError)


async def has_transactions(bootstrap: str, transactional_id: str) -> bool:
    """Whether the broker initialises a producer with ``transactional_id``
    (use an id of its own: initialising fences an older producer with it)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    sender = logging.getLogger("aiokafka.producer.sender")
    quiet = sender.level
    sender.setLevel(logging.CRITICAL)  # its error log of the answer we expect on no
    try:
        await producer.start()
    except NOT_IMPLEMENTED:
        return False
    finally:
        sender.setLevel(quiet)
        await producer.stop()
    return True
