"""Hostile HTTP input against real workers' web servers
(the HTTP endpoints): a property-based campaign of raw requests, written
byte by byte on a TCP socket, against two ordered workers and two command
workers (two per group, so queries are redirected between them too), with
``SEQKEEPER_HTTP_TOKEN`` set.

Requests: random and malformed paths of the state queries
(``/state/<key>``, ``/entities/<tenant>/<id>``,
``/commands/<messageId>?tenant=...``) and of the other pages, odd
percent-encoding, raw non-UTF-8 bytes, very long paths and query strings,
huge and many headers, bodies up to 2 MiB, absent, malformed, wrong and
almost-right bearer tokens, wrong methods and HTTP versions.

Invariants: every request is answered, never with a 5xx (but the 503 of a
partition not yet owned, which says when to ask again); a state query
without the right token is answered 401 (or refused before routing: 400,
404, 405) and no answer to it holds data; afterwards ``/health`` and
``/ready`` answer 200, the workers' logs hold no traceback, no ERROR and no
token, and a message and a command sent after the campaign are processed
(their outputs come out). The budget is fixed: ``EXAMPLES`` requests per
topology, well under a minute per broker."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import quote, quote_from_bytes

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkeeper.broker import free_port
from seqkeeper.demo import publish
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration

T = TypeVar("T")

TOKEN = "hostile-campaign-token-" + uuid.uuid4().hex[:12]
#: Requests per topology (hypothesis examples, spread over the two workers).
EXAMPLES = 300
KEYS = [f"key-{i}" for i in range(6)]
TENANT = "t1"
#: What only an answer that holds state has (a key's, an entity's, a
#: receipt's, or a redirect to the owner that holds it).
DATA = (b'"next_expected"', b'"seen"', b'"version"', b'"outbox"', b'"command"', b'"owner"')


def command(sku: str, mid: str, quantity: int) -> tuple[bytes, bytes]:
    doc = {
        "messageId": mid,
        "commandType": "AddStock",
        "schemaVersion": 1,
        "correlationId": f"c-{mid}",
        "partitionKey": sku,
        "tenantId": TENANT,
        "payload": {"quantity": quantity},
    }
    return sku.encode(), orjson.dumps(doc)


def event(key: str, seq: int) -> tuple[bytes, bytes]:
    return key.encode(), orjson.dumps({"messageId": f"{key}:{seq}", "seq": seq, "type": "t"})


# -- a raw HTTP exchange ------------------------------------------------------


@dataclass
class Answer:
    status: int | None  #: None: the connection closed with no answer
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""
    #: the server reset the connection (it closed with bytes of ours unread)
    reset: bool = False


def exchange(port: int, request: bytes, head: bool, timeout: float = 15.0) -> Answer:
    """Send ``request`` to 127.0.0.1:``port``; the first final answer."""
    answer = Answer(None)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            with contextlib.suppress(BrokenPipeError):
                sock.sendall(request)
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return answer
                    data += chunk
                top, data = data.split(b"\r\n\r\n", 1)
                lines = top.split(b"\r\n")
                answer.status = int(lines[0].split()[1])
                if 100 <= answer.status < 200:
                    continue  # (100 Continue: the final answer follows)
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    answer.headers[name.strip().lower()] = value.strip()
                size = 0 if head else int(answer.headers.get(b"content-length", b"0"))
                while len(data) < size:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                answer.body = data[:size]
                return answer
        except ConnectionResetError:
            # A server that closes with bytes of ours unread (a body it
            # never reads, after a request it refused) resets the
            # connection, and the reset may discard its answer here.
            answer.reset = True
            return answer


# -- the requests -------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    method: bytes
    target: bytes
    version: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    #: the request targets a state query's route (its path, as routed)
    query_route: bool

    def raw(self) -> bytes:
        lines = [self.method + b" " + self.target + (b" " + self.version if self.version else b"")]
        lines += [name + b": " + value for name, value in self.headers]
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body

    def __repr__(self) -> str:  # (bodies and paths run to megabytes)
        return f"Hostile({self.raw()[:400]!r}... {len(self.raw())} bytes)"

    def unread(self) -> bool:
        """Whether the server may close with bytes of this request unread
        (a body it has no reason to read, or framing it refuses)."""
        names = {name.lower() for name, _ in self.headers}
        return len(self.raw()) > 8190 or b"transfer-encoding" in names or bool(self.body)

    def authorized(self) -> bool:
        """Whether the first ``Authorization`` header carries the token, by
        the documented rule (docs/security.md: ``Bearer <token>``, the
        scheme's case and surrounding spaces aside)."""
        for name, value in self.headers:
            if name.lower() == b"authorization":
                scheme, _, credentials = value.strip().partition(b" ")
                return scheme.lower() == b"bearer" and credentials.strip() == TOKEN.encode()
        return False


def pct(data: bytes) -> bytes:
    return quote_from_bytes(data, safe="").encode()


ODD = [
    b"%", b"%z", b"%zz", b"%2F", b"..", b"%2e%2e", b"%00", b"%ED%A0%80", b"%C0%AF", b"%FF%FE",
    b"a;b", b"a%3Fb", b"~", b"%25", b"%0D%0ALocation:%20http://evil", b"%E2%80%AE", b"+", b"%20",
]  # fmt: skip


def weighted(*choices: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """One of ``choices`` (weight, strategy), as often as its weight: most
    requests are well formed but for one hostile part, so that they reach
    the handlers instead of stopping at the parser."""
    # (sampled_from draws evenly; an integer range would favour its ends)
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


segments = weighted(
    (30, st.sampled_from([*KEYS, TENANT]).map(str.encode)),
    (
        20,
        st.text(max_size=24).map(
            lambda t: quote(t.encode("utf-8", "surrogatepass"), safe="").encode()
        ),
    ),
    (20, st.binary(max_size=24).map(pct)),  # any bytes, percent-encoded (non-UTF-8 among them)
    (15, st.sampled_from(ODD)),
    (4, st.binary(min_size=1, max_size=8).filter(lambda b: b"\n" not in b)),  # raw bytes
    (2, st.integers(1_000, 20_000).map(lambda n: b"k" * n)),  # past aiohttp's 8190 bytes
)

query_names = weighted(
    (3, st.sampled_from([b"tenant", b"key", b"searched", b"id", b"message_id"])), (1, segments)
)
searched = st.lists(st.integers(-(2**70), 2**70), max_size=8).map(
    lambda ns: ",".join(map(str, ns)).encode()
)
query_values = weighted(
    (3, st.just(TENANT.encode())), (3, segments), (1, searched), (1, st.just(b""))
)
queries = st.lists(st.tuples(query_names, query_values), max_size=3).map(
    lambda pairs: b"&".join(n + b"=" + v for n, v in pairs)
)


def with_query(path: bytes, query: bytes) -> bytes:
    return path + (b"?" + query if query else b"")


def targets(topology: str) -> st.SearchStrategy[tuple[bytes, bool]]:
    """(request target, whether it is a state query's route)."""
    query: st.SearchStrategy[tuple[bytes, bool]]
    if topology == "ordered":
        query = st.tuples(segments, queries).map(
            lambda p: (with_query(b"/state/" + p[0], p[1]), True)
        )
    else:
        entity = st.tuples(segments, segments, queries).map(
            lambda p: (with_query(b"/entities/" + p[0] + b"/" + p[1], p[2]), True)
        )
        receipt = st.tuples(segments, queries).map(
            lambda p: (with_query(b"/commands/" + p[0], p[1]), True)
        )
        query = st.one_of(entity, receipt)
    other = st.one_of(
        st.sampled_from(
            [b"/health", b"/ready", b"/metrics", b"/", b"*", b"/table/state/k/", b"/router/"]
        ),
        st.tuples(segments, segments).map(lambda p: b"/" + p[0] + b"/" + p[1]),
    ).map(lambda t: (t, False))
    absolute = query.map(lambda t: (b"http://elsewhere.invalid" + t[0], t[1]))
    return weighted((8, query), (1, other), (1, absolute))


methods = weighted(
    (80, st.just(b"GET")),
    (15, st.sampled_from([b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"TRACE", b"get"])),
    (5, st.binary(min_size=1, max_size=8).filter(lambda b: not set(b) & set(b" \r\n"))),
)

versions = weighted(
    (85, st.just(b"HTTP/1.1")),
    (5, st.just(b"HTTP/1.0")),
    (10, st.sampled_from([b"HTTP/2.0", b"HTTP/9.9", b"HTTP/1.1x", b""])),
)

RIGHT = b"Bearer " + TOKEN.encode()
auths = weighted(
    (20, st.just(())),
    (35, st.just(((b"Authorization", RIGHT),))),
    (
        25,
        st.sampled_from(
            [
                b"bearer " + TOKEN.encode(),
                b"Bearer  " + TOKEN.encode() + b" ",
                b"Bearer " + TOKEN.encode()[:-1],
                b"Bearer " + TOKEN.encode() + b"x",
                b"Bearer " + TOKEN.upper().encode(),
                b"Bearer",
                b"Bearer ",
                b"",
                b"Basic " + base64.b64encode(b"admin:" + TOKEN.encode()),
                TOKEN.encode(),
                b"Bearer " + TOKEN.encode() + b"\x00",
                b"Bearer " + TOKEN.encode() + b"\xff",
                b"Bearer \xff\xfe" + TOKEN.encode(),
                b"Bearer " + b"A" * 9000,
            ]
        ).map(lambda v: ((b"Authorization", v),)),
    ),
    (
        10,
        st.binary(max_size=64)
        .filter(lambda b: not set(b) & set(b"\r\n"))
        .map(lambda v: ((b"Authorization", b"Bearer " + v),)),
    ),
    # two of them: only the first counts
    (
        10,
        st.permutations(
            [(b"Authorization", RIGHT), (b"Authorization", b"Bearer wrong-token-xxxxxxxx")]
        ).map(tuple),
    ),
)

plain_values = weighted(
    (
        9,
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(str.encode),
    ),
    (1, st.binary(max_size=40).filter(lambda b: not set(b) & set(b"\r\n"))),  # control bytes too
)
more_headers = st.lists(
    weighted(
        (
            70,
            st.tuples(
                st.sampled_from([b"X-Forwarded-For", b"Content-Type", b"Accept", b"Cookie"]),
                plain_values,
            ),
        ),
        (4, st.just((b"X-Huge", b"h" * 9000))),
        (4, st.just((b"Expect", b"100-continue"))),
        (4, st.just((b"Accept", b"text/html"))),
        (4, st.just((b"Transfer-Encoding", b"chunked"))),
        (2, st.just((b"Content-Length", b"-1"))),
        (2, st.just((b"Content-Length", b"99999999999999999999"))),
        (
            10,
            st.tuples(
                st.binary(min_size=1, max_size=12).filter(lambda b: not set(b) & set(b":\r\n ")),
                plain_values,
            ),
        ),
    ),
    max_size=3,
)
many_headers = st.integers(100, 300).map(lambda n: tuple((b"X-%d" % i, b"y") for i in range(n)))
bodies = weighted(
    (70, st.just(b"")),
    (15, st.binary(max_size=200)),
    (3, st.just(b"0\r\n\r\n")),
    (3, st.just(b"zz\r\nnot a chunk\r\n")),
    (5, st.just(b"x" * 65536)),
    (2, st.just(b"x" * (2 << 20))),
)


@st.composite
def hostile(draw: st.DrawFn, topology: str) -> Hostile:
    target, query_route = draw(targets(topology))
    headers = [(b"Host", b"127.0.0.1")] if draw(st.sampled_from([True] * 19 + [False])) else []
    headers += list(draw(auths))
    headers += draw(more_headers)
    if draw(st.sampled_from([False] * 29 + [True])):
        headers += list(draw(many_headers))
    body = draw(bodies)
    names = {name.lower() for name, _ in headers}
    if body and b"content-length" not in names and b"transfer-encoding" not in names:
        headers.append((b"Content-Length", str(len(body)).encode()))
    headers.append((b"Connection", b"close"))
    return Hostile(draw(methods), target, draw(versions), tuple(headers), body, query_route)


# -- the workers --------------------------------------------------------------


@dataclass
class Group:
    settings: Settings
    workers: list[WorkerProcess]

    def ports(self) -> list[int]:
        return [w.settings.runtime.web_port for w in self.workers]


def get(url: str, token: str | None = TOKEN) -> tuple[int, dict]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read() or b"{}")


def settle(group: Group, path: str, done, timeout: float = 120) -> None:
    """Until every worker answers ``path`` (its own state or, followed, its
    peer's) and the state is ``done``."""
    deadline = time.monotonic() + timeout
    while True:
        answers = [get(f"http://127.0.0.1:{port}{path}") for port in group.ports()]
        if all(status == 200 and done(body) for status, body in answers):
            return
        for worker in group.workers:
            worker.check_alive()
        assert time.monotonic() < deadline, f"{path} never settled: {answers}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def groups(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Group]]:
    from seqkeeper.settings import EXAMPLE_HANDLERS

    tmp = tmp_path_factory.mktemp("hostile")
    made: dict[str, Group] = {}
    try:
        for topology in ("ordered", "commands"):
            tag = uuid.uuid4().hex[:8]
            base = Settings.of(
                bootstrap=broker.bootstrap,
                data_dir=tmp / topology,
                partitions=2,
                session_timeout=6.0,
                gap_timeout=120.0,
                topology=topology,
                handlers=EXAMPLE_HANDLERS,
                app_id=f"hostile-{tag}",
                input_topic=f"in-{tag}",
                ordered_topic=f"ordered-{tag}",
                deduped_topic=f"deduped-{tag}",
                dlq_topic=f"dlq-{tag}",
                late_topic=f"late-{tag}",
                command_topic=f"cmd-{tag}",
                events_topic=f"ev-{tag}",
                command_dlq_topic=f"cdlq-{tag}",
                http_token=TOKEN,
            )
            asyncio.run(create_topics(base.broker.bootstrap, base.topics(), 2))
            if topology == "ordered":
                seed = [event(key, seq) for key in KEYS for seq in (1, 2, 4)]
                asyncio.run(publish(base.broker.bootstrap, base.ordered.input_topic, seed))
            else:
                seed = [command(key, f"add-{key}", 1) for key in KEYS]
                asyncio.run(publish(base.broker.bootstrap, base.commands.command_topic, seed))
            workers = [
                WorkerProcess(
                    base.with_overrides(data_dir=tmp / f"{topology}-{n}", web_port=free_port()),
                    tmp / f"{topology}-{n}.log",
                )
                for n in range(2)
            ]
            made[topology] = Group(base, workers)
            for worker in workers:
                worker.start()
        for group in made.values():
            for worker in group.workers:
                worker.wait_ready(180)
        for key in KEYS:  # the seeds are state, answered by either worker
            settle(made["ordered"], f"/state/{key}", lambda s: s.get("next_expected") == 3)
            settle(made["commands"], f"/entities/{TENANT}/{key}", lambda e: e.get("version") == 1)
        yield made
    finally:
        for group in made.values():
            for worker in group.workers:
                worker.stop()


def check(group: Group, request: Hostile, n: int) -> int | None:
    """Send ``request`` to worker ``n``, check the answer; its status."""
    port = group.ports()[n % 2]
    head = request.method == b"HEAD"
    answer = exchange(port, request.raw(), head)
    shown = f"{request.raw()[:300]!r} -> {answer.status} {answer.body[:300]!r}"
    if answer.reset and request.unread():
        return None  # (a TCP artefact, see exchange; the worker is checked after the campaign)
    assert answer.status is not None, f"no answer: {shown}"
    if answer.status >= 500:
        # only a partition nobody owns or being restored, which says when to ask again
        assert answer.status == 503 and b"retry-after" in answer.headers, shown
        assert request.authorized(), shown
    if not request.authorized():
        assert not any(marker in answer.body for marker in DATA), f"data without the token: {shown}"
        if request.query_route and answer.status not in (400, 404, 405):
            # (400: refused by the parser, before routing; 404: routed
            # elsewhere, as a path with a raw '/' or '?' in a segment)
            assert answer.status == 401, shown
            assert answer.headers[b"www-authenticate"].startswith(b'Bearer realm="seqkeeper"')
    for worker in group.workers:
        worker.check_alive()
    return answer.status


CAMPAIGN = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def campaign(group: Group, topology: str) -> Counter[int | None]:
    """The campaign against ``group``: how many answers of each status."""
    seen: Counter[int | None] = Counter()

    @CAMPAIGN
    @given(request=hostile(topology), n=st.integers(0, 1))
    def attack(request: Hostile, n: int) -> None:
        seen[check(group, request, n)] += 1

    attack()
    return seen


def test_hostile_requests_to_the_ordered_workers(groups: dict[str, Group]) -> None:
    seen = campaign(groups["ordered"], "ordered")
    # the campaign reached every answer: a key's state, a redirect to its
    # owner, a refusal for want of the token, the parser's and the router's
    assert {200, 307, 401, 400, 404} <= set(seen), seen


def test_hostile_requests_to_the_command_workers(groups: dict[str, Group]) -> None:
    seen = campaign(groups["commands"], "commands")
    assert {200, 307, 401, 400, 404} <= set(seen), seen


def test_after_the_campaign_the_workers_are_well_and_keep_processing(
    groups: dict[str, Group],
) -> None:
    for group in groups.values():
        for port in group.ports():
            for page in ("/health", "/ready"):
                assert get(f"http://127.0.0.1:{port}{page}", token=None)[0] == 200, (port, page)

    ordered, commands = groups["ordered"].settings, groups["commands"].settings
    asyncio.run(publish(ordered.broker.bootstrap, ordered.ordered.input_topic, [event("after", 1)]))
    asyncio.run(
        publish(
            commands.broker.bootstrap,
            commands.commands.command_topic,
            [command("after", "add-after", 5)],
        )
    )
    settle(groups["ordered"], "/state/after", lambda s: s.get("next_expected") == 2)
    settle(groups["commands"], f"/entities/{TENANT}/after", lambda e: e.get("version") == 1)
    deadline = time.monotonic() + 60
    while True:
        deduped = asyncio.run(read_topic(ordered.broker.bootstrap, ordered.ordered.deduped_topic))
        events = asyncio.run(read_topic(commands.broker.bootstrap, commands.commands.events_topic))
        if any(r.key == b"after" for r in deduped) and any(r.key == b"after" for r in events):
            break
        assert time.monotonic() < deadline, "the message or the command sent after never came out"
        time.sleep(0.5)

    for group in groups.values():
        for worker in group.workers:
            log = worker.log()
            assert "Traceback" not in log, log[-5000:]
            assert "[ERROR]" not in log, [line for line in log.splitlines() if "[ERROR]" in line]
            assert TOKEN not in log
