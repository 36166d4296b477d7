"""Account balances from postings: an ordered processor for seqkeeper.

Run it with ``seqkeeper worker --processor balances:post`` from this
directory. seqkeeper calls ``post(state, message)`` once per posting of an
account, in the account's ``seq`` order, however shuffled or duplicated the
input was; what it returns is stored before its outputs are produced.
"""

from seqkeeper import GAP_SKIPPED, Message, Output


def post(state, message: Message):
    """``state`` is what this function returned for the account's previous
    message (``None`` for a new account): ``{"balance": int, "missing":
    [[from, to], ...]}``. Returns the new state and the outputs."""
    state = state or {"balance": 0, "missing": []}
    balance = state["balance"]

    if message.type == GAP_SKIPPED:
        # seqkeeper gave up waiting for these postings. The balance can no
        # longer be trusted to be complete, so say so once (an output a
        # reconciliation job can act on) and remember it in the state.
        gap = message.data  # {"from": a, "to": b}, both inclusive
        missing = [*state["missing"], [gap["from"], gap["to"]]]
        out = Output({**gap, "balance": balance}, type="PostingsMissing")
        return {"balance": balance, "missing": missing}, [out]

    if message.type != "Posted":
        return state, []  # not a posting: nothing to do, and nothing to retry

    amount = message.data["amount"]
    if balance + amount < 0:
        # A business rejection is an output, not an exception: an exception
        # would be retried and then dead-lettered, as for a failure.
        out = Output(
            {"amount": amount, "balance": balance, "reason": "insufficient funds"},
            type="Rejected",
        )
        return state, [out]

    balance += amount
    out = Output({"amount": amount, "balance": balance}, type="Booked")
    return {**state, "balance": balance}, [out]
