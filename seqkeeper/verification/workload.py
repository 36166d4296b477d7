"""A generated workload: out of order, with redeliveries and malformed records.

Deterministic for a given seed, so a failing demo can be reproduced.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import orjson

#: Malformed records of distinct kinds, as (key, value); ``...`` = a live key.
MALFORMED_KINDS: list[tuple[str, bytes | None, bytes | None]] = [
    ("invalid JSON", b"k", b'{"messageId": "x", "seq": 1,'),
    ("not an object", b"k", b"[1, 2, 3]"),
    ("missing messageId", b"k", b'{"seq": 1, "type": "t"}'),
    ("missing seq", b"k", b'{"messageId": "bad-1", "type": "t"}'),
    ("seq zero", b"k", b'{"messageId": "bad-2", "seq": 0, "type": "t"}'),
    ("seq negative", b"k", b'{"messageId": "bad-3", "seq": -4, "type": "t"}'),
    ("seq not an integer", b"k", b'{"messageId": "bad-4", "seq": "7", "type": "t"}'),
    ("seq float", b"k", b'{"messageId": "bad-5", "seq": 1.5, "type": "t"}'),
    ("type not a string", b"k", b'{"messageId": "bad-6", "seq": 1, "type": 3}'),
    ("null value", b"k", None),
    ("missing key", None, b'{"messageId": "bad-7", "seq": 1, "type": "t"}'),
    ("invalid UTF-8", b"k", b'{"messageId": "\xff\xfe", "seq": 1, "type": "t"}'),
]


@dataclass
class Workload:
    records: list[tuple[bytes | None, bytes | None]]
    messages: int
    keys: int
    duplicates: int
    malformed: int
    lost: int = 0


def generate(
    messages: int = 100_000,
    keys: int = 1_000,
    duplicate_rate: float = 0.05,
    malformed: int = 24,
    jitter: int | None = None,
    seed: int = 7,
    payload_bytes: int = 64,
    lost: int = 0,
) -> Workload:
    """``messages`` valid messages over ``keys`` keys, shuffled and duplicated.

    Each message is displaced by up to ``jitter`` positions (default three
    times the number of keys, so consecutive messages of a key often swap);
    ``duplicate_rate`` of them are delivered again a little later, byte for
    byte; ``malformed`` bad records (cycling through :data:`MALFORMED_KINDS`)
    are mixed in; ``lost`` messages are never delivered at all (permanent
    gaps, which the worker gives up after its gap timeout).
    """
    rng = random.Random(seed)
    jitter = 3 * keys if jitter is None else jitter
    key_names = [f"key-{i:05d}" for i in range(keys)]
    order = [i % keys for i in range(messages)]
    rng.shuffle(order)
    next_seq = [1] * keys
    stream: list[tuple[float, bytes | None, bytes | None]] = []
    pad = "x" * payload_bytes
    duplicates = 0
    never = set(rng.sample(range(messages), min(lost, messages)))
    for pos, k in enumerate(order):
        seq = next_seq[k]
        next_seq[k] += 1
        name = key_names[k]
        if pos in never:
            continue
        value = orjson.dumps(
            {
                "messageId": f"{name}:{seq}:{rng.getrandbits(32):08x}",
                "seq": seq,
                "type": "demo.Event",
                "data": {"amount": rng.randint(1, 1000), "pad": pad},
                "metadata": {"producer": "seqkeeper-demo"},
            }
        )
        when = pos + rng.uniform(0, jitter)
        stream.append((when, name.encode(), value))
        if rng.random() < duplicate_rate:
            duplicates += 1
            stream.append((when + rng.uniform(1, jitter + 1), name.encode(), value))
    for i in range(malformed):
        _, bad_key, bad_value = MALFORMED_KINDS[i % len(MALFORMED_KINDS)]
        if bad_key == b"k":
            bad_key = rng.choice(key_names).encode()
        stream.append((rng.uniform(0, messages), bad_key, bad_value))
    stream.sort(key=lambda item: item[0])
    return Workload(
        records=[(k, v) for _, k, v in stream],
        messages=messages,
        keys=keys,
        duplicates=duplicates,
        malformed=malformed,
        lost=len(never),
    )
