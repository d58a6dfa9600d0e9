"""What a message meant for people must not look like: a Swift value dumped into it
(`unavailable("…")`, `.insufficientSpace`, `invalidAccessToken`, escaped quotes, labelled tuples).
The same shapes as Tests/dbxfsTests/ErrorMessageTests.swift, for the logs and outputs the
Python suites see. `swift_spellings(text)` returns the offending lines (empty when clean)."""

import re

PATTERNS = [
    (re.compile(r"\b[a-z][A-Za-z0-9]*\("), "an enum case with its payload"),
    (re.compile(r"\b[a-z]+[A-Z][A-Za-z0-9]*\b"), "a camelCase identifier"),
    (re.compile(r"(^|[\s(\[:])\.[a-z][A-Za-z0-9]+"), "a dotted case name"),
    (re.compile(r"\\[\"'\\]"), "an escaped quote or backslash"),
    (re.compile(r"\(\w+: "), "a labelled tuple"),
]


def swift_spellings(text, ignore=()):
    """Lines of `text` holding a Swift spelling, as (line, what, match). Lines containing any of
    `ignore` (paths a test chose, say) are skipped."""
    found = []
    for line in text.splitlines():
        if any(part in line for part in ignore):
            continue
        # The timestamp and level prefix of a log line are ours and fine.
        message = re.sub(r"^\S+Z dbxfs: \w+: ", "", line)
        for pattern, what in PATTERNS:
            match = pattern.search(message)
            if match:
                found.append((line, what, match.group(0)))
                break
    return found
