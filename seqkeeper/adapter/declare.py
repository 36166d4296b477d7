"""Faust declares a topic only when it does not exist: with every topic
created by an admin, the worker's user needs no Create ACL.

Upstream: ``faust.transport.drivers.aiokafka.Transport._really_create_topic``
(faust-streaming 0.15) skips a topic only when the consumer client's cached
metadata lists it, and that cache holds only the topics the client has
asked about so far: for the leader assignor's topic
(``<app>-__assignor-__leader``) it sends CreateTopics at start, and a
broker answers TOPIC_AUTHORIZATION_FAILED to a user without Create even
for a topic that exists (it answers TOPIC_ALREADY_EXISTS only to one that
may create it). Faust raises that and the worker dies.

:class:`DeclareExistingTransport` asks the broker first (a Metadata request
for that topic alone, without auto-creation) and declares only a topic the
broker does not know. Private members: ``Transport._create_topic`` (the one
both Faust's producer and consumer call to declare a topic).
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode import Service

from seqkeeper.adapter.authorized_operations import topic_errors


class DeclareExistingTransport(faust_aiokafka.Transport):
    """Faust's transport, declaring only the topics the broker does not know."""

    async def _create_topic(
        self,
        owner: Service,
        client: aiokafka.AIOKafkaClient,
        topic: str,
        partitions: int,
        replication: int,
        **kwargs: Any,
    ) -> None:
        # (a topic the user may not describe is declared, and Faust reports the denial)
        if (await topic_errors(client, [topic])).get(topic) == 0:
            owner.log.debug("Topic %r exists, not declared.", topic)
            return
        await super()._create_topic(owner, client, topic, partitions, replication, **kwargs)
