"""SCRAM-SHA-256 and PLAIN on the SASL_SSL listener (SCRAM-SHA-512 is
test_secured_kafka's): topics created, records written and read back,
through seqkeeper's own clients; a wrong password is one line."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from seqkeeper.demo import publish
from seqkeeper.security import SecurityFailure, installed, surfaced
from seqkeeper.settings import Secret
from seqkeeper.topics import create_topics, read_topic
from tests.secured_broker import SecuredKafkaBroker

pytestmark = pytest.mark.integration

#: Not the admin's password (test_secured_kafka greps the logs for it).
WRONG_PASSWORD = "not-the-admin-password-0451"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_a_round_trip_with_each_mechanism(
    secured_broker: SecuredKafkaBroker, mechanism: str
) -> None:
    security = secured_broker.client_security_as(
        secured_broker.admin, secured_broker.admin_password, mechanism
    )
    bootstrap = secured_broker.bootstrap
    topic = f"{mechanism.lower()}-{uuid.uuid4().hex[:8]}"
    records = [(f"k{i % 3}".encode(), f"v{i}".encode()) for i in range(20)]
    with installed(security):
        asyncio.run(create_topics(bootstrap, [topic], 2))
        asyncio.run(publish(bootstrap, topic, records))
        read = asyncio.run(read_topic(bootstrap, topic))
    assert sorted((r.key, r.value) for r in read) == sorted(records)

    wrong = secured_broker.client_security_as(
        secured_broker.admin, Secret(WRONG_PASSWORD), mechanism
    )
    with installed(wrong), pytest.raises(SecurityFailure) as caught, surfaced(bootstrap):
        asyncio.run(read_topic(bootstrap, topic))
    assert "authentication failed" in str(caught.value) and mechanism in str(caught.value)
    assert WRONG_PASSWORD not in str(caught.value)
