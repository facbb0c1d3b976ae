"""Call chain verification: every process's tool call records, held to their own links,
their head rows and the main chain's anchors (`store.call_chains`).

Each chain is walked in `seq` order from its own start (`call_links.chain_start`): a record
edited, moved from another chain, renumbered (reordered) or inserted fails its link, and a
record deleted leaves a gap. Its end is proven twice over. The head row (written with each
batch, MAC'd under the audit key) says where it ends, so a tail cut off without it shows;
but a database writer who kept an earlier head row could put it back with the tail. The
main chain's `calls_anchored` events cannot be put back so (the main chain and its witness
prove them): a chain shorter than an anchor, or whose record at an anchored seq is not the
anchored link, was cut or rewritten. What neither proves: the records after a chain's last
anchor against a head row rolled back with them (a process killed before it anchored, or
tampering within one anchoring interval); `unanchored` counts them, chain by chain, so an
auditor sees how much rests on the head rows alone.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Literal

from toolkit_vault.store.call_chain_reads import CallChainReads
from toolkit_vault.store.call_links import call_head_link, chain_start, record_links
from toolkit_vault.store.chain import Signer

__all__ = ["CallChainBreak", "CallChainsReport", "verify_call_chains"]

CallProblem = Literal["edited", "deleted", "inserted", "truncated"]
MAX_LISTED = 100  # chains a report lists (the count covers them all)


@dataclass(frozen=True)
class CallChainBreak:
    chain: str
    seq: int
    problem: CallProblem
    message: str

    def as_json(self) -> dict[str, Any]:
        return {
            "chain": self.chain,
            "seq": self.seq,
            "problem": self.problem,
            "message": self.message,
        }


@dataclass(frozen=True)
class CallChainsReport:
    records: int  # call records stored, in every chain
    verified: int  # those whose links held, up to the first break of each chain
    unanchored: int  # verified records after their chain's last anchor (head row alone)
    chains: list[dict[str, Any]] = field(default_factory=list)
    chain_count: int = 0
    broken: CallChainBreak | None = None
    marks: dict[str, list[Any]] = field(default_factory=dict)  # chain -> [seq, link, anchored]

    def as_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "verified": self.verified,
            "unanchored": self.unanchored,
            "chain_count": self.chain_count,
            "chains": self.chains,
            "problem": None if self.broken is None else self.broken.as_json(),
        }


def verify_call_chains(
    reads: CallChainReads,
    sign: Signer,
    main_verified: int,
    batch_size: int,
    since: Mapping[str, Any] | None = None,
    main_since: int = 0,
) -> CallChainsReport:
    """Walk every call chain; `main_verified`: the main chain's verified length (anchors
    past it are not believed). `since` (an incremental run): chain -> [seq, link hex,
    anchored] a believed mark says were verified when the main chain was verified up to
    `main_since`; each chain is then walked from there, its anchors read after it."""
    marks = _marks(since or {})
    anchors: dict[str, list[tuple[int, bytes]]] = {}
    broken: CallChainBreak | None = None
    for main_seq, details in reads.anchors(main_verified, main_since if marks else 0):
        chain, seq, mac = details.get("chain"), details.get("seq"), details.get("mac")
        try:
            link = bytes.fromhex(mac) if isinstance(mac, str) else None
        except ValueError:
            link = None
        if not isinstance(chain, str) or not isinstance(seq, int) or link is None:
            what = f"anchor event {main_seq} of the main chain names no chain, seq and link"
            broken = broken or CallChainBreak(str(chain), 0, "edited", what)
            continue
        anchors.setdefault(chain, []).append((seq, link))
    heads = reads.heads()
    summaries: list[dict[str, Any]] = []
    verified = unanchored = 0
    for chain in sorted(set(reads.chains()) | set(anchors) | set(marks)):
        start = marks.get(chain, _START)
        good, found, last = _walk(
            reads, sign, chain, anchors.get(chain, []), heads.get(chain), batch_size, start
        )
        broken = broken or found
        verified += good
        last_anchor = max([start[2], *(seq for seq, _ in anchors.get(chain, []))])
        after = max(good - last_anchor, 0)
        unanchored += after
        summaries.append(
            {"chain": chain, "records": good, "anchored": last_anchor, "unanchored": after}
        )
        marks[chain] = (good, last, last_anchor)
    listed = sorted(summaries, key=lambda s: (-s["unanchored"], s["chain"]))[:MAX_LISTED]
    return CallChainsReport(
        reads.record_count(),
        verified,
        unanchored,
        listed,
        len(summaries),
        broken,
        {chain: [seq, mac.hex(), anchored] for chain, (seq, mac, anchored) in marks.items()},
    )


_START = (0, b"", 0)  # a chain no mark covers: walked from its own start


def _marks(since: Mapping[str, Any]) -> dict[str, tuple[int, bytes, int]]:
    """A believed mark's chains, as (seq, link, anchored); a malformed entry is dropped
    (that chain is walked whole)."""
    found = {}
    for chain, entry in since.items():
        try:
            seq, link, anchored = int(entry[0]), bytes.fromhex(entry[1]), int(entry[2])
        except (TypeError, ValueError, IndexError):
            continue
        if seq > 0 and len(link) == 32:
            found[str(chain)] = (seq, link, anchored)
    return found


def _walk(
    reads: CallChainReads,
    sign: Signer,
    chain: str,
    anchors: list[tuple[int, bytes]],
    head: tuple[int, bytes, bytes] | None,
    batch_size: int,
    start: tuple[int, bytes, int],
) -> tuple[int, CallChainBreak | None, bytes]:
    """(records verified, the first break, the last good link) of one chain: its links
    (after `start`, a mark's (seq, link, anchored)), then its end against its head row
    and its anchors."""
    anchored = dict(anchors)
    good, previous = start[0], start[1] if start[0] else chain_start(chain)
    if good:
        problem = _still_there(reads, chain, good, previous, anchors)
        if problem is not None:
            return 0, problem, chain_start(chain)
    rows = reads.records(chain, batch_size=batch_size, after=good or None)
    with closing(rows):
        for record in rows:
            seq = int(record["seq"])
            if seq <= good:
                found = _break(chain, seq, "inserted", f"record {seq} is out of sequence")
                return good, found, previous
            if seq > good + 1:
                gap = f"record {good + 1} was deleted (the chain jumps to {seq})"
                return good, _break(chain, good + 1, "deleted", gap), previous
            if not record_links(sign, chain, previous, record):
                what = "edited, moved or reordered (its MAC does not follow the record before)"
                return good, _break(chain, seq, "edited", f"record {seq} was {what}"), previous
            mac = bytes(record["mac"])
            if seq in anchored and not hmac.compare_digest(anchored[seq], mac):
                what = (
                    f"record {seq} is not the one the main chain anchored: the chain was rewritten"
                )
                return good, _break(chain, seq, "edited", what), previous
            previous, good = mac, seq
    ends = [*anchors, (start[2], b"")]  # a mark's anchored seq is one more end to reach
    return good, _check_end(sign, chain, good, previous, ends, head), previous


def _still_there(
    reads: CallChainReads,
    chain: str,
    seq: int,
    link: bytes,
    anchors: list[tuple[int, bytes]],
) -> CallChainBreak | None:
    """(An incremental run.) The chain still holds the record a mark verified, every one
    before it, and the records new anchors name at or below it."""
    stored = reads.link_of(chain, seq)
    if stored is None or not hmac.compare_digest(stored, link):
        what = f"record {seq}, verified by the last run, was deleted or rewritten"
        return _break(chain, seq, "edited", what)
    if reads.count_to(chain, seq) != seq:
        what = f"records before {seq}, verified by the last run, were deleted"
        return _break(chain, 1, "deleted", what)
    for at, anchored in anchors:
        if at <= seq:
            found = reads.link_of(chain, at)
            if found is None or not hmac.compare_digest(found, anchored):
                what = (
                    f"record {at} is not the one the main chain anchored: the chain was rewritten"
                )
                return _break(chain, at, "edited", what)
    return None


def _check_end(
    sign: Signer,
    chain: str,
    last: int,
    last_mac: bytes,
    anchors: list[tuple[int, bytes]],
    head: tuple[int, bytes, bytes] | None,
) -> CallChainBreak | None:
    anchored = max((seq for seq, _ in anchors), default=0)
    if anchored > last:
        what = f"records {last + 1}..{anchored} were deleted (the main chain anchored {anchored})"
        return _break(chain, last + 1, "truncated", what)
    if head is None:
        what = "its head row is missing: the end of the chain is unproven"
        return _break(chain, last + 1, "truncated", what)
    seq, mac, head_mac = head
    if not hmac.compare_digest(call_head_link(sign, chain, seq, mac), head_mac):
        return _break(
            chain, last + 1, "truncated", "its head row fails its MAC: the end is unproven"
        )
    if seq > last:
        what = f"records {last + 1}..{seq} were deleted (the head row records {seq})"
        return _break(chain, last + 1, "truncated", what)
    if seq < last:
        return _break(
            chain, seq + 1, "inserted", f"records after {seq} are not covered by the head"
        )
    if not hmac.compare_digest(mac, last_mac):
        return _break(chain, last, "edited", f"record {last} does not match the chain's head")
    return None


def _break(chain: str, seq: int, problem: CallProblem, message: str) -> CallChainBreak:
    return CallChainBreak(chain, seq, problem, f"call chain {chain}: {message}")
