"""Which brokers have transactions, asked as a worker will ask: Apache
Kafka does, the embedded broker (which lists the API but answers
InitProducerId with an unknown error) does not."""

from __future__ import annotations

import asyncio
import uuid

from seqkeeper.runtime.guarantee import has_transactions
from tests.conftest import Broker


def test_the_broker_says_whether_it_has_transactions(broker: Broker) -> None:
    answer = asyncio.run(has_transactions(broker.bootstrap, f"probe-{uuid.uuid4().hex[:8]}"))
    assert answer is (not broker.is_tansu)
