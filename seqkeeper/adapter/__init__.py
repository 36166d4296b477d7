"""Every override of Faust and aiokafka, and every use of their private
members, in one package: a module per job, each naming the upstream code
it changes and why.

Pinned upstream: faust-streaming 0.15.3, aiokafka 0.14, mode-streaming 0.4.
An upgrade starts here: :data:`PRIVATE_MEMBERS` is the list to check
against the new versions (``tests/adapter/test_private_members.py`` keeps
it exact, and finds any private member used outside this package).

Each module, its job, and the tests that fail without it:

- :mod:`.faust_app`: the ``faust.App`` seqkeeper runs
  (``tests/adapter/test_overrides.py``).
- :mod:`.lifecycle`: the options the app is built with and the lifecycle
  the runtime installs in it, read by the overrides below
  (``test_overrides.py``; ``tests/integration/test_crash.py``).
- :mod:`.transport`: the consumer and transport composed of the overrides
  (``test_overrides.py``: every override is in the app's consumer).
- :mod:`.options`: consumer options Faust does not expose: fetch wait,
  static membership, raw records (``test_overrides.py``;
  ``tests/integration/test_worker.py``, static member).
- :mod:`.highwater`: exact partition ends for Faust's recovery
  (``tests/integration/test_worker.py``: a restart on its own state on the
  embedded broker, which crashes without it).
- :mod:`.commit`: hooks run before every offset commit
  (``test_overrides.py``; ``tests/integration/test_crash.py``).
- :mod:`.getmany`: a fetch that drops no record of the active partitions
  (``tests/adapter/test_consumer.py``).
- :mod:`.batches`: batch sources, records handed over as fetched
  (``tests/integration/test_batch_source.py``, ``test_consumer.py``).
- :mod:`.records`: aiokafka's fetcher yields record batches' own records
  (``tests/adapter/test_records.py``), and reads a header name that is not
  UTF-8 escaped instead of raising (``tests/hostile/test_workers.py``).
- :mod:`.store`: the tables' RocksDB store applies changelog records and
  their offset in one batch (``tests/adapter/test_store.py``).
- :mod:`.recovery`: recovery resumes the input only once it was sought
  (``tests/integration/test_worker.py``: rebuilt from the changelog, no
  input lost), and tells its progress per partition
  (``tests/integration/test_restore_progress.py``).
- :mod:`.tables`: the table manager's hooks, raw tables, RocksDB access,
  what each changelog partition replayed (``test_overrides.py``;
  ``tests/state/test_rocksdb_store.py``; ``tests/adapter/test_replays.py``;
  ``test_worker.py``: a clean restart replays nothing;
  ``test_restore_progress.py``: per partition, what local state lacked).
- :mod:`.membership`: a restart after ``kill -9`` removes the dead
  worker's member from the group instead of waiting out its session
  (``tests/integration/test_crash.py``).
- :mod:`.producer`: ordered records produced as whole record batches
  (``tests/adapter/test_producer.py``).
- :mod:`.transactions`: a transactional producer per owned input partition,
  exactly-once (``tests/integration/test_crash.py``, ``test_zombie.py``).
- :mod:`.offsets`: exact end offsets and fresh topic metadata
  (``tests/integration/test_broker_deviations.py``, ``test_topics.py``).
- :mod:`.diagnostics`: ``kill -USR1``, the consumer's and the producer's
  state logged (``tests/integration/test_worker.py`` reads it).
- :mod:`.routing`: a key's partition and the group member that owns it,
  for state queries (``tests/runtime/test_queries.py``;
  ``tests/integration/test_state_queries.py``).
- :mod:`.authorized_operations`: requests that ask what the worker may do without
  doing it, for its start-up check (``tests/security/test_acls.py``).
- :mod:`.destinations`: whether a topic input names (a reply's) takes the
  worker's writes, asked before producing to it
  (``tests/integration/test_reply_topics.py``).
- :mod:`.declare`: Faust declares only topics the broker does not know, so
  pre-created topics need no Create ACL (``test_acls.py``).
- :mod:`.web`: a request the web server cannot parse is one DEBUG line, not
  an ERROR with a traceback quoting its bytes
  (``tests/security/test_http_hostile.py``).
"""

#: Private members of Faust, mode and aiokafka this package touches (read,
#: write or override), by module. Nothing outside the package touches any.
PRIVATE_MEMBERS: dict[str, frozenset[str]] = {
    "faust_app": frozenset({"_ensure_producer", "_new_transport"}),
    "batches": frozenset(
        {
            "_acked",
            "_acked_index",
            "_add_gap",
            "_buffered_partitions",
            "_commit_every",
            "_committed_offset",
            "_drain_messages",
            "_n_acked",
            "_read_offset",
            "_stopped",
            "_to_message",
            "_wait_next_records",
            "_waiting_for_ack",
        }
    ),
    "commit": frozenset({"_commit", "_commit_offsets", "_committed_offset"}),
    "transactions": frozenset({"_txn_manager"}),
    "diagnostics": frozenset(
        {
            "_active_partitions",
            "_batches",
            "_committed_offset",
            "_ctime",
            "_ensure_consumer",
            "_fetch_task",
            "_fetcher",
            "_in_flight",
            "_message_accumulator",
            "_muted_partitions",
            "_pending_tasks",
            "_producer",
            "_read_offset",
            "_records",
            "_sender",
            "_sender_task",
            "_subscription",
            "_thread",
        }
    ),
    "getmany": frozenset({"_active_partitions", "_getmany", "_thread"}),
    "highwater": frozenset({"_highwaters"}),
    "offsets": frozenset({"_client"}),
    "options": frozenset(
        {
            "_create_worker_consumer",
            "_fetch_max_wait_ms",
            "_group_instance_id",
            "_isolation_level",
            "_key_deserializer",
        }
    ),
    "producer": frozenset({"_build", "_builder", "_relative_offset", "_wait_on_metadata"}),
    "records": frozenset(
        {
            "_buffer",
            "_check_crcs",
            "_pos",
            "_read_msg",
            "_records",
            "_tp",
            "_unpack_records",
        }
    ),
    "recovery": frozenset(
        {
            "_build_offsets",
            "_committed_offset",
            "_db_for_partition",
            "_ensure_consumer",
            "_fetcher",
            "_get_active_partitions",
            "_is_changelog_tp",
            "_read_offset",
            "_pending_tasks",
            "_records",
            "_seek_offsets",
            "_set_recovery_ended",
            "_thread",
            "_wait",
        }
    ),
    "tables": frozenset({"_db_for_partition", "_dbs", "_recovery", "_update_channels"}),
    "store": frozenset({"_db_for_partition"}),
    "transport": frozenset({"_new_consumer_thread"}),
    "authorized_operations": frozenset({"_client"}),
    "declare": frozenset({"_create_topic"}),
}
