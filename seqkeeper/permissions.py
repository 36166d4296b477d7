"""The ACLs a worker needs, as ``kafka-acls.sh`` commands, and the check
the worker makes at start, before Faust: a permission missing is one line
naming the operation, the resource and the command that grants it, and
exit 1 (not a traceback, not a hang in Faust's retries).

The list is the least a worker of each topology needs with Kafka's
StandardAuthorizer (Read and Write imply Describe):

* its input topic: Read; its output topics: Write;
* topics prefixed ``G-`` (``G`` the group id, :attr:`Settings.group_id`):
  Read and Write, for Faust's changelog ``G-<table>-changelog``, its leader
  topic ``G-__assignor-__leader`` and the repartition topic
  ``G-<input>-repartition``;
* consumer group ``G`` (and ``G-repartition`` with a key field): Read;
* transactional ids prefixed ``G-``: Write (``exactly_once``: one id per
  input partition, ``G-<input>-<p>``, and the probe ``G-probe``);
* the command worker: Write on every ``replyTo`` topic its clients name;
* Create on its own topics and the ``G-`` prefix, unless an admin created
  them all (:func:`internal_topics` names Faust's): the worker sends
  CreateTopics only for topics the metadata does not show.

The other users of a deployment (:data:`ROLES`, ``seqkeeper acls --role``)
use no consumer group and no transactional id:

* ``reader``: ``verify`` reads the ordered worker's input, outputs, dead
  letters and late topic; ``inspect`` reads the command worker's changelog;
* ``compactor``: ``compact`` reads both topologies' changelogs and message
  topics, the processor's output and the reply topics named (those that
  exist; it writes only the warehouse);
* ``replayer``: ``replay`` writes its ``--topic`` (Create: it creates it
  when missing);
* ``client``: :class:`seqkeeper.client.CommandClient` and ``seqkeeper
  send`` write the command topic and read their reply topic from its end,
  which they create when missing.

The principal they are granted to is the one the broker authorizes
(:func:`principal_of`, :mod:`seqkeeper.principal`): the SASL user, or the
client certificate's mapped subject; never ``User:ANONYMOUS``, which every
unauthenticated client shares.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAuthorizationFailedError

from seqkeeper.adapter.authorized_operations import (
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    client_of,
    group_operations,
    may_write,
    topic_errors,
)
from seqkeeper.principal import MappingError, anonymous_reason, certificate_principal
from seqkeeper.runtime.repartition import group_of
from seqkeeper.security import BrokerRefused, kafka_options
from seqkeeper.settings import VARS, SettingError, Settings

CLUSTER_AUTHORIZATION_FAILED = 31


@dataclass(frozen=True, slots=True)
class Grant:
    """One ``kafka-acls.sh --add``: ``operations`` on the resources ``names``
    of one kind (``topic``, ``group``, ``transactional-id``), literal or by
    prefix."""

    operations: tuple[str, ...]
    kind: str
    names: tuple[str, ...]
    prefixed: bool = False

    def command(self, principal: str, bootstrap: str = "BOOTSTRAP") -> str:
        """The ``kafka-acls.sh`` command, run as an admin (``admin.properties``);
        the principal quoted for the shell (a certificate's subject holds
        ``,``, spaces, ``\\``)."""
        ops = " ".join(f"--operation {o}" for o in self.operations)
        names = " ".join(f"--{self.kind} {shlex.quote(n)}" for n in self.names)
        pattern = " --resource-pattern-type prefixed" if self.prefixed else ""
        return (
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties "
            f"--add --allow-principal {shlex.quote('User:' + principal)} {ops}{pattern} {names}"
        )


def internal_topics(settings: Settings) -> list[str]:
    """The topics Faust declares itself, all prefixed ``G-``: the table's
    changelog and the leader assignor's topic."""
    g = settings.group_id
    table = "commands" if settings.runtime.topology == "commands" else "state"
    return [f"{g}-{table}-changelog", f"{g}-__assignor-__leader"]


def read_topics(settings: Settings) -> list[str]:
    """The worker's topics it reads (beside its ``G-`` topics)."""
    if settings.runtime.topology == "commands":
        return [settings.commands.command_topic]
    return [settings.ordered.input_topic]


def written_topics(settings: Settings) -> list[str]:
    """The worker's topics it writes (beside its ``G-`` topics and reply topics)."""
    read = set(read_topics(settings))
    prefix = f"{settings.group_id}-"
    return [t for t in settings.topics() if t not in read and not t.startswith(prefix)]


def groups(settings: Settings) -> list[str]:
    """The worker's consumer groups (the repartition stage's, named where
    the stage names it, with a key field)."""
    extra = [group_of(settings)] if settings.repartition_topic() else []
    return [settings.group_id, *extra]


def worker_grants(
    settings: Settings, *, create: bool = True, reply_topics: Sequence[str] = ()
) -> list[Grant]:
    """The ACLs a worker with ``settings`` needs; ``create=False``: with
    every topic (:meth:`Settings.topics` and :func:`internal_topics`)
    created beforehand by an admin."""
    g = settings.group_id
    grants = [
        Grant(("Read",), "topic", tuple(read_topics(settings))),
        Grant(("Write",), "topic", tuple(written_topics(settings))),
        Grant(("Read", "Write"), "topic", (f"{g}-",), prefixed=True),
        Grant(("Read",), "group", tuple(groups(settings))),
        Grant(("Write",), "transactional-id", (f"{g}-",), prefixed=True),
    ]
    if reply_topics:
        grants.append(Grant(("Write",), "topic", tuple(reply_topics)))
    if settings.runtime.topology != "commands" and settings.ordered.processor:
        # a processor's topic patterns (its named topics are written topics)
        # (other patterns no ACL expresses: `seqkeeper acls` says so)
        prefixes, _ = pattern_grants(settings.ordered.processor_topics)
        if prefixes:
            grants.append(Grant(("Write",), "topic", prefixes, prefixed=True))
    if create:
        own = tuple(t for t in settings.topics() if not t.startswith(f"{g}-"))
        grants += [
            Grant(("Create",), "topic", own),
            Grant(("Create",), "topic", (f"{g}-",), prefixed=True),
        ]
    return grants


def pattern_grants(patterns: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The prefixes of ``patterns`` that are a non-empty prefix and one
    ``*`` at the end (a prefixed ACL), and the other patterns (which no ACL expresses);
    names are left out."""
    prefixes = tuple(p[:-1] for p in patterns if len(p) > 1 and p.find("*") == len(p) - 1)
    others = tuple(p for p in patterns if "*" in p and p[:-1] not in prefixes)
    return prefixes, others


#: The users of a deployment ``seqkeeper acls --role`` prints the ACLs of.
ROLES = ("worker", "command-worker", "reader", "compactor", "replayer", "client")
#: ``seqkeeper send``'s reply topic unless given (its ``--reply-topic``).
SEND_REPLY_TOPIC = "seqkeeper-send.replies"


def role_grants(
    settings: Settings,
    role: str,
    *,
    create: bool = True,
    reply_topics: Sequence[str] = (),
    topic: str = "",
) -> list[Grant]:
    """The ACLs of ``role`` (:data:`ROLES`) with ``settings``: ``worker``,
    the worker of the settings' topology; ``command-worker`` (``reply_topics``:
    the ``replyTo`` topics it writes); ``reader`` (``verify``, ``inspect``);
    ``compactor`` (``compact``; ``reply_topics``: the reply topics it
    audits); ``replayer`` (``replay --topic topic``);
    ``client`` (``seqkeeper send``, :class:`~seqkeeper.client.CommandClient`:
    ``reply_topics`` are its reply topics, ``seqkeeper send``'s default
    when none). ``create=False``: the topics exist (an admin created them)."""
    if role == "worker":
        return worker_grants(settings, create=create, reply_topics=reply_topics)
    if role == "command-worker":
        commands = settings.with_overrides(topology="commands")
        return worker_grants(commands, create=create, reply_topics=reply_topics)
    if role == "reader":
        from seqkeeper.inspect import changelog_topic

        o = settings.ordered
        verified = (o.input_topic, o.ordered_topic, o.deduped_topic, o.dlq_topic, o.late_topic)
        return [Grant(("Read",), "topic", (*verified, changelog_topic(settings)))]
    if role == "compactor":
        from seqkeeper.spark_sink.job import plan_topics

        # (every topic it would compact, as if all existed: it skips the others)
        both = [settings.with_overrides(topology=t) for t in ("ordered", "commands")]
        every = {t for s in both for t in [*s.topics(), *internal_topics(s)]}
        # the processor's output (whether or not this has the setting) and
        # the reply topics named (--reply-topic): compact audits them too
        every |= {settings.ordered.processed_topic, *reply_topics}
        changelogs, messages = plan_topics(settings, every)
        return [Grant(("Read",), "topic", tuple(dict.fromkeys([*changelogs, *messages])))]
    if role == "replayer":
        if not topic:
            raise ValueError("the replayer role needs the topic replay writes (--topic)")
        grants = [Grant(("Write",), "topic", (topic,))]
        return grants + ([Grant(("Create",), "topic", (topic,))] if create else [])
    if role == "client":
        replies = tuple(reply_topics) or (SEND_REPLY_TOPIC,)
        grants = [
            Grant(("Write",), "topic", (settings.commands.command_topic,)),
            Grant(("Read",), "topic", replies),
        ]
        return grants + ([Grant(("Create",), "topic", replies)] if create else [])
    raise ValueError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")


#: Kafka's name for a client with neither a SASL user nor a client certificate.
ANONYMOUS = "ANONYMOUS"


def principal_of(settings: Settings) -> str:
    """The name of the principal (``User:<name>``) the broker authorizes
    these settings' clients as: the SASL user under SASL; with TLS, a
    client certificate and no SASL, the certificate's subject mapped by
    ``SEQKEEPER_SSL_PRINCIPAL_MAPPING_RULES`` (the broker's
    ``ssl.principal.mapping.rules``); else :data:`ANONYMOUS`, which no
    grant should name (:func:`is_anonymous`). A :class:`SettingError`
    naming the variable when the certificate or the rules cannot be read."""
    security = settings.security
    if security.security_protocol.startswith("SASL_"):
        return security.sasl_username
    if security.security_protocol == "SSL" and security.ssl_certfile:
        path, rules = security.ssl_certfile, security.ssl_principal_mapping_rules
        try:
            return certificate_principal(path, rules)
        except MappingError as e:
            raise SettingError(f"{VARS['ssl_principal_mapping_rules'].env}={rules}: {e}") from None
        except OSError as e:
            raise SettingError(
                f"{VARS['ssl_certfile'].env}={path}: cannot read it "
                f"({e.strerror or type(e).__name__})"
            ) from None
        except ValueError as e:
            raise SettingError(f"{VARS['ssl_certfile'].env}={path}: {e}") from None
    return ANONYMOUS


def is_anonymous(settings: Settings) -> bool:
    """Whether these settings' clients have no principal of their own
    (neither a SASL user nor a client certificate)."""
    security = settings.security
    return not (
        security.security_protocol.startswith("SASL_")
        or (security.security_protocol == "SSL" and security.ssl_certfile)
    )


class PermissionDenied(BrokerRefused):
    """The broker denies the worker an operation it needs: the message, one
    line, names the user, the operation, the resource and the grant."""


def denied(
    settings: Settings,
    operation: str,
    kind: str,
    name: str,
    answer: str,
    *,
    by_prefix: bool = True,
) -> PermissionDenied:
    """The refusal of ``operation`` on ``kind`` ``name``, and its grant (by
    prefix for the worker's ``G-`` resources; ``by_prefix=False``: the
    resource itself, for the commands that read a worker's topics)."""
    prefix = f"{settings.group_id}-"
    prefixed = by_prefix and kind != "group" and name.startswith(prefix)
    what = f"{kind} prefix {prefix!r} ({name!r})" if prefixed else f"{kind} {name!r}"
    if is_anonymous(settings):
        return PermissionDenied(
            f"the broker denies {operation} on {what} ({answer}): "
            + anonymous_reason(settings.security.security_protocol)
            + ", then grant that user what `seqkeeper acls` prints"
        )
    user = principal_of(settings)
    grant = Grant((operation,), kind, (prefix if prefixed else name,), prefixed)
    return PermissionDenied(
        f"user {user!r} may not {operation} {what} ({answer}): grant it with "
        + grant.command(user, settings.broker.bootstrap)
    )


async def check_topics(settings: Settings) -> None:
    """Before any CreateTopics: every topic of the worker and of Faust is
    visible (Describe), and each one missing may be created (a CreateTopics
    with ``validate_only``, which creates nothing)."""
    wanted = [*settings.topics(), *internal_topics(settings)]
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.broker.bootstrap, **kafka_options())
    try:
        await admin.start()
        missing = []
        errors = await topic_errors(client_of(admin), wanted)
        for topic in wanted:
            code = errors.get(topic, UNKNOWN_TOPIC_OR_PARTITION)
            if code == TOPIC_AUTHORIZATION_FAILED:
                # (Read and Write imply Describe: the grant names the one needed)
                op = "Read" if topic in read_topics(settings) else "Write"
                raise denied(settings, op, "topic", topic, "TOPIC_AUTHORIZATION_FAILED")
            if code == UNKNOWN_TOPIC_OR_PARTITION:
                missing.append(topic)
        if missing:
            partitions, replication = settings.broker.partitions, settings.broker.replication
            answer = await admin.create_topics(
                [NewTopic(t, partitions, replication) for t in missing], validate_only=True
            )
            refused = {name: code for name, code, *_ in answer.topic_errors}
            for name in missing:  # (in the order of the settings, not of the answer)
                if refused.get(name) in (TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED):
                    raise denied(settings, "Create", "topic", name, "TOPIC_AUTHORIZATION_FAILED")
    finally:
        await admin.close()


async def check_access(settings: Settings) -> None:
    """Once the topics exist: Read on the groups, Read on the topics read,
    Write on the topics written (probes that neither join a group nor
    append a record)."""
    bootstrap = settings.broker.bootstrap
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, **kafka_options(), enable_auto_commit=False
    )
    try:
        await consumer.start()
        client = client_of(consumer)
        for group in groups(settings):
            ops = await group_operations(client, group)
            if ops is None or "Read" not in ops:
                raise denied(settings, "Read", "group", group, "GROUP_AUTHORIZATION_FAILED")
        await _check_reads(settings, consumer, read_topics(settings))
        cluster = await client.fetch_all_metadata()  # (Faust's topics may not exist yet)
        for topic in [*written_topics(settings), *internal_topics(settings)]:
            leader = cluster.leader_for_partition(TopicPartition(topic, 0))
            if leader is not None and not await may_write(client, leader, topic, 0):
                raise denied(settings, "Write", "topic", topic, "TOPIC_AUTHORIZATION_FAILED")
    finally:
        await consumer.stop()


async def _check_reads(
    settings: Settings, consumer: AIOKafkaConsumer, topics: Iterable[str]
) -> None:
    """A Fetch from the end of partition 0 of each topic (no group)."""
    for topic in topics:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        try:
            await asyncio.wait_for(consumer.getmany(tp, timeout_ms=300), 30)
        except TopicAuthorizationFailedError:
            raise denied(settings, "Read", "topic", topic, "TOPIC_AUTHORIZATION_FAILED") from None
