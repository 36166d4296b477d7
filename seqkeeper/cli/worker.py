"""``seqkeeper worker``: the long-running worker (:mod:`seqkeeper.worker`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from seqkeeper.cli.options import (
    AppIdOpt,
    BrokerOpt,
    CodecOpt,
    DedupedTopicOpt,
    DlqTopicOpt,
    InputTopicOpt,
    KeyFieldOpt,
    MessageIdFieldOpt,
    MessageIdHeaderOpt,
    OrderedTopicOpt,
    SeqFieldOpt,
    SeqHeaderOpt,
    flag,
    settings_of,
)


def worker(
    broker: BrokerOpt = None,
    data_dir: Annotated[Optional[Path], flag("data_dir")] = None,
    web_port: Annotated[Optional[int], flag("web_port")] = None,
    app_id: AppIdOpt = None,
    partitions: Annotated[Optional[int], flag("partitions", min=1)] = None,
    input_topic: InputTopicOpt = None,
    ordered_topic: OrderedTopicOpt = None,
    deduped_topic: DedupedTopicOpt = None,
    dlq_topic: DlqTopicOpt = None,
    session_timeout: Annotated[Optional[float], flag("session_timeout", min=0)] = None,
    log_level: Annotated[Optional[str], flag("log_level")] = None,
    topology: Annotated[Optional[str], flag("topology")] = None,
    handlers: Annotated[Optional[str], flag("handlers")] = None,
    processor: Annotated[Optional[str], flag("processor")] = None,
    processed_topic: Annotated[Optional[str], flag("processed_topic")] = None,
    processor_topics: Annotated[Optional[str], flag("processor_topics")] = None,
    key_field: KeyFieldOpt = None,
    seq_field: SeqFieldOpt = None,
    seq_header: SeqHeaderOpt = None,
    message_id_field: MessageIdFieldOpt = None,
    message_id_header: MessageIdHeaderOpt = None,
    codec: CodecOpt = None,
    handler_timeout: Annotated[Optional[float], flag("handler_timeout", min=0)] = None,
    broker_wait: Annotated[Optional[float], flag("broker_wait", min=0)] = None,
) -> None:
    """Run the long-running worker (Ctrl-C or SIGTERM stops it gracefully)."""
    from seqkeeper.worker import run_worker

    settings = settings_of(
        bootstrap=broker,
        data_dir=data_dir,
        web_port=web_port,
        app_id=app_id,
        partitions=partitions,
        input_topic=input_topic,
        ordered_topic=ordered_topic,
        deduped_topic=deduped_topic,
        dlq_topic=dlq_topic,
        log_level=log_level,
        session_timeout=session_timeout,
        topology=topology,
        handlers=handlers,
        processor=processor,
        processed_topic=processed_topic,
        processor_topics=processor_topics,
        key_field=key_field,
        seq_field=seq_field,
        seq_header=seq_header,
        message_id_field=message_id_field,
        message_id_header=message_id_header,
        codec=codec,
        handler_timeout=handler_timeout,
        broker_wait=broker_wait,
    )
    run_worker(settings)  # (what stops it before it runs: one line and its code, errors.py)
