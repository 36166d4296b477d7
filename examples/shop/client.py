"""Send the shop's commands one by one and print each reply.

python client.py [--broker HOST:PORT] [--topic commands.in] [--signing-key PEM --key-id KID]

With a signing key, each command carries a token for its tenant and type
(for a worker run with SEQKEEPER_COMMAND_AUTH=jwt, as run.py does).
"""

import argparse
import json
import os

from seqkeeper.client import SyncCommandClient, TokenSigner

CARD = "4242 4242 4242 4242"
DECLINED = "4000 0000 0000 0002"
SLOW = "4000 0000 0000 0259"  # the payment service answers too late once

BOOK = {"sku": "book", "quantity": 2, "unitPrice": 15, "card": CARD}

#: (messageId, commandType, order, payload, what it shows). The messageIds
#: are the client's: a command sent again with the same one is applied once.
SCENARIO = [
    ("order-1:place", "PlaceOrder", "order-1", BOOK, "a new order, paid"),
    ("order-1:place", "PlaceOrder", "order-1", BOOK, "the same command again: the same reply"),
    ("order-2:place", "PlaceOrder", "order-2", {**BOOK, "card": DECLINED}, "a declined card"),
    ("order-3:place", "PlaceOrder", "order-3", {**BOOK, "card": SLOW}, "a slow payment: retried"),
    ("order-1:again", "PlaceOrder", "order-1", BOOK, "a second order-1"),
    ("order-1:cancel", "CancelOrder", "order-1", {}, "cancelled"),
    ("order-9:cancel", "CancelOrder", "order-9", {}, "an order never placed"),
]


def describe(reply) -> str:
    data = "" if reply.data is None else " " + json.dumps(reply.data, sort_keys=True)
    if reply.success:
        return f"ok, version {reply.version}:{data}"
    return f"refused: {reply.message}{data}"


def run(bootstrap: str, topic: str, timeout: float = 60.0, signer: TokenSigner | None = None) -> list:
    """Send the scenario's commands, each after the previous one's reply
    (signed by ``signer`` when given); prints and returns the replies."""
    replies = []
    with SyncCommandClient(
        bootstrap, command_topic=topic, client_id="shop-client", tenant="shop", signer=signer
    ) as client:
        for message_id, kind, order, payload, what in SCENARIO:
            print(f"{kind:<12} {order}  ({what})", flush=True)
            reply = client.request(kind, order, payload, message_id=message_id, timeout=timeout)
            print(f"  -> {describe(reply)}", flush=True)
            replies.append(reply)
    return replies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--topic", default=os.environ.get("SEQKEEPER_COMMAND_TOPIC", "commands.in"))
    parser.add_argument("--signing-key", help="a PEM private key the workers trust")
    parser.add_argument("--key-id", help="its kid, as the workers know it")
    args = parser.parse_args()
    if not args.broker:
        parser.error("give --broker or set KAFKA_BOOTSTRAP_SERVERS")
    if (args.signing_key is None) != (args.key_id is None):
        parser.error("give both --signing-key and --key-id, or neither")
    signer = args.signing_key and TokenSigner.from_file(args.signing_key, args.key_id)
    run(args.broker, args.topic, signer=signer or None)


if __name__ == "__main__":
    main()
