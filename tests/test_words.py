"""One word per concept: the names in the code use the docs' glossary (docs/words.md, "Words"),
never a retired synonym. A failure names the file, the line and the word to use.

The check reads identifiers (Python's own tokens), not prose: comments and
docstrings follow the glossary by review.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("api", "actors", "coordinator", "core")


@dataclass(frozen=True)
class Retired:
    """A retired identifier and what to use instead."""

    pattern: str
    """Matched against a whole identifier (``re.fullmatch``)."""
    use: str
    """The glossary's word."""
    allowed_in: tuple[str, ...] = ()
    """Files where the name means something else, or is public and fixed."""
    attribute_ok: bool = False
    """A public name: reading it as an attribute (``x.name``) is fine anywhere."""
    call_ok: bool = False
    """The name as a call or definition (``name(``), or as a method of ``VERB_OWNERS``
    (``TransactionParticipant.fence``), is another, kept word."""


VERB_OWNERS = ("TransactionParticipant", "TransactionTable")
"""Classes whose ``fence`` method is the transactional verb."""


RETIRED = (
    Retired(
        "fence",
        "lease (a member's Lease carried by its calls; 'fence' is only the verb)",
        call_ok=True,  # TransactionParticipant.fence(...), TransactionTable.fence(...)
    ),
    Retired(
        r"(?i).*(^|_)home(_|$).*|_?Home[A-Z]\w*",
        "host (the channel that runs a subscriber's receive session)",
        # a user's home directory and Java's: other meanings of the word
        allowed_in=("api/client/cluster.py", "api/bridge/spark_session.py"),
    ),
    Retired(
        "member_id",
        "reader_id (public records keep member_id: ScaledMember, MemberStats)",
        allowed_in=("api/client/stats.py", "core/scaling.py", "api/autoscale/scaler_actor.py"),
        attribute_ok=True,
    ),
    Retired(
        "subscriber_id",
        "reader_id (Subscriber.subscriber_id is the public name)",
        allowed_in=("api/client/subscriber.py",),
        attribute_ok=True,
    ),
    Retired(
        r"_?extend_lease|ExtendLease|check_lease",
        "hold (ExtendHold, extend_hold, check_hold_seconds; the public extend_lease stays)",
        allowed_in=("api/client/subscriber.py", "core/records.py"),  # the public methods
        attribute_ok=True,
    ),
    Retired(
        r"(?i)_*(un)?settl\w*|\w*_settl\w*",
        "nothing is settled: a session's takes name positions (a publisher's calls "
        "complete, a shared element is acked, a batch is finished, benches are quiet)",
    ),
    Retired("SettleReceives", "PauseReceives (a seek pauses the receives at their host)"),
    Retired(
        r"(?i)_?(loans?|lent|lend\w*)|\w*_lent|LentTakes",
        "nothing is lent: a take names the position it reads from (see 'position' and "
        "'fetch, offer' in the glossary)",
    ),
)

PENDING: set[str] = set()
"""Files the sweep has not reached yet (a path, or a folder ending in "/"): none. Keep
it empty; a name listed here would be a known debt, not an exception."""

UNTYPED_LEASE = re.compile(r"\b(lease|fence)\s*:\s*Any\b")
"""A lease parameter or field typed Any: it is a ``ReaderLease``."""

DESIGN_CITED = re.compile(r"\bDESIGN( section)? \d")
"""The product spec (DESIGN.md) is not in the repository: the code cites the docs,
which say the same in the project's own words (docs/architecture.md and the guides)."""


def _pending(relative: str) -> bool:
    return any(relative == p or (p.endswith("/") and relative.startswith(p)) for p in PENDING)


def _sources() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py"))


def retired_names(relative: str, text: str) -> list[str]:
    """Every retired identifier in one file's text, as ``file:line: name -> use``."""
    found = []
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for index, token in enumerate(tokens):
        if token.type != tokenize.NAME:
            continue
        before = tokens[index - 1].string if index else ""
        after = tokens[index + 1].string if index + 1 < len(tokens) else ""
        for retired in RETIRED:
            if not re.fullmatch(retired.pattern, token.string):
                continue
            if relative in retired.allowed_in:
                continue
            if retired.attribute_ok and before == ".":
                continue
            if retired.call_ok and after == "(":
                continue
            owner = tokens[index - 2].string if index >= 2 else ""
            if retired.call_ok and before == "." and owner in VERB_OWNERS:
                continue
            found.append(f"{relative}:{token.start[0]}: {token.string} -> {retired.use}")
    for number, line in enumerate(text.splitlines(), 1):
        if UNTYPED_LEASE.search(line):
            found.append(f"{relative}:{number}: a lease typed Any -> ReaderLease")
        if DESIGN_CITED.search(line):
            found.append(f"{relative}:{number}: DESIGN -> the docs' page that says it (docs/)")
        if relative.startswith("api/") and re.match(r"class Member\b", line):
            found.append(
                f"{relative}:{number}: class Member -> Membership (one Member: the coordinator's)"
            )
    return found


def test_the_code_uses_no_retired_synonym() -> None:
    found = []
    for path in _sources():
        relative = path.relative_to(ROOT).as_posix()
        if not _pending(relative):
            found += retired_names(relative, path.read_text())
    assert not found, "retired words (see docs/words.md, 'Words'):\n" + "\n".join(found)


def test_every_pending_file_still_exists() -> None:
    """A pending entry that names nothing is stale: drop it."""
    missing = [p for p in PENDING if not (ROOT / p).exists()]
    assert not missing, missing


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("def take(reader_id, fence): ...", "fence"),
        ("x = receives.home_channel", "home_channel"),
        ("class _HomeIteration: ...", "_HomeIteration"),
        ("join(group, member_id)", "member_id"),
        ("send(ExtendLease)", "ExtendLease"),
        ("self._settle_calls()", "_settle_calls"),
        ("self._loans = {}", "_loans"),
        ("cursor.lent = None", "lent"),
        ("def settle_lent(self): ...", "settle_lent"),
        ("def f(lease: Any): ...", "Any"),
        ("# read again (DESIGN 5.6: nothing is lost)", "DESIGN"),
    ],
)
def test_the_check_finds_a_retired_name(text: str, word: str) -> None:
    found = retired_names("api/example.py", text + "\n")
    assert any(word in line for line in found), found


@pytest.mark.parametrize(
    "text",
    [
        "self.table.fence(request.transactional_id, request.epoch)",
        "FenceTransactions: TransactionParticipant.fence,",
        "TransactionFencedError, FenceTransactions",
        "member.extend_lease(batch)",
        "stats.member_id",
        "subscriber.subscriber_id",
        "lease: ReaderLease = None",
        "host = self._choice.host(owned)",
    ],
)
def test_the_check_passes_the_glossarys_words(text: str) -> None:
    assert retired_names("api/example.py", text + "\n") == []
