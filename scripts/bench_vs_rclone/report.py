"""What a run measured, and the one table it prints.

Each case run gives a Sample per row (its figure, the daemon's CPU seconds and peak RSS, and a
count of remote calls); each limit run gives a Limit per row. The table holds, per profile and
row, the median over the pairs of each, the ratios of the medians (oriented so that > 1 means
dbxfs does better), CPU seconds (per GiB for throughputs) and the highest peak RSS seen.
"""

import math
from dataclasses import dataclass, field


@dataclass
class Sample:
    value: float
    cpu: float = math.nan          # the daemon's CPU seconds over the measured part
    rss: float = math.nan          # its peak RSS (VmHWM), MiB, at the end of the case
    calls: float = math.nan        # the remote calls the row counts (see Row.calls)
    total_calls: float = math.nan  # every remote call during the case (mount included)
    timed_out: bool = False        # the client was not done when the harness stopped waiting:
                                   # the value is a bound (the time waited), shown as "> value"


@dataclass
class Limit:
    value: float
    text: str = ""                 # how it was made, when more than a number (e.g. a second limit)


@dataclass
class Row:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    per_gib: bool = False          # CPU seconds reported per GiB moved
    calls: str = ""                # what the call count in parentheses counts


ROWS = [
    Row("cold_read", "cold sequential read, SIZE, MB/s (limit: curl download, 1 connection)", "MB/s", True, True,
        "downloads"),
    Row("warm_read", "warm re-read, MB/s (limit: the same bytes, a fresh copy in /dev/shm read once)", "MB/s", True, True),
    Row("ttfb", "time to first byte of a cold file, ms (limit: 1 round trip + 256 KiB)", "ms", False),
    Row("write", "write SIZE, `cp` then until on the server, MB/s (limit: curl upload session)", "MB/s", True, True,
        "upload calls"),
    Row("write_cp", "… time until `cp` returns, s (limit: `cp` to the cache's disk; goal ≤ 1.2×)", "s", False),
    Row("slow_write", "write SLOW at 32 MiB/s (a slow writer), then seconds from its close until on the server",
        "s", False, True, "upload calls"),
    Row("small_files", "SMALL × 4 KiB files, `cp -r` then until on the server, s", "s", False, calls="upload calls"),
    Row("ls", "cold `ls -lR` of LS files, s (limit: recursive list_folder, 1 connection)", "s", False,
        calls="list calls"),
    Row("random", "READS random 4 KiB preads over a cold SIZE file, THREADS threads, ops/s (limit: 4 KiB "
        "ranges, THREADS kept-alive connections)", "ops/s", True, calls="downloads"),
    Row("rm", "`rm -rf` of NS files in 10 folders, then until on the server, s", "s", False, calls="calls"),
    Row("tar", "`tar x` of NS files in 100 folders, then until on the server, s", "s", False, calls="calls"),
    Row("git", "`git clone` of a local NS-file repository, then until on the server, s", "s", False,
        calls="calls"),
    Row("first_access", "first access after a cold mount (`stat` deep in DEEP entries), ms (limit: 1 list_folder)",
        "ms", False, calls="calls"),
]
ROW_BY_KEY = {row.key: row for row in ROWS}


def median(values):
    values = sorted(v for v in values if not math.isnan(v))
    if not values:
        return math.nan
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def fmt(value, digits=None):
    """A figure with as many decimals as its size deserves (or `digits`); "–" when missing."""
    if value is None or math.isnan(value):
        return "–"
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:.{digits}f}"


@dataclass
class Results:
    samples: dict = field(default_factory=dict)   # (profile, row, client) -> [Sample]
    limits: dict = field(default_factory=dict)    # (profile, row) -> [Limit]
    failures: list = field(default_factory=list)  # (profile, case, client, pair, message)

    def add(self, profile, client, samples):
        for key, sample in samples.items():
            self.samples.setdefault((profile, key, client), []).append(sample)

    def add_limits(self, profile, limits):
        for key, limit in limits.items():
            self.limits.setdefault((profile, key), []).append(limit)

    def summary(self, profile, key, client):
        """(median value, median CPU, highest RSS, median calls, median total calls, runs, whether
        any run timed out)."""
        runs = self.samples.get((profile, key, client), [])
        rss = [s.rss for s in runs if not math.isnan(s.rss)]
        return (median([s.value for s in runs]), median([s.cpu for s in runs]), max(rss) if rss else math.nan,
                median([s.calls for s in runs]), median([s.total_calls for s in runs]), len(runs),
                any(s.timed_out for s in runs))

    def limit(self, profile, key):
        runs = self.limits.get((profile, key), [])
        # The text of the run whose value is the median, so "1.2× = …" matches the figure beside it.
        by_value = sorted((limit for limit in runs if limit.text), key=lambda limit: limit.value)
        return median([limit.value for limit in runs]), (by_value[len(by_value) // 2].text if by_value else "")


def ratio(row, dbxfs, other):
    """How many times better dbxfs does than `other` (> 1: dbxfs is better)."""
    if math.isnan(dbxfs) or math.isnan(other) or dbxfs == 0 or other == 0:
        return math.nan
    return dbxfs / other if row.higher_is_better else other / dbxfs


def table(results, profiles, profile_labels, names):
    """The markdown table: one line per profile and row that was measured."""
    lines = ["| profile | figure | dbxfs | rclone | limit | dbxfs ÷ rclone | dbxfs ÷ limit | "
             "CPU-s dbxfs / rclone | peak RSS MiB dbxfs / rclone |",
             "|---|---|---|---|---|---|---|---|---|"]
    for profile in profiles:
        for row in ROWS:
            d = results.summary(profile, row.key, "dbxfs")
            r = results.summary(profile, row.key, "rclone")
            limit, limit_text = results.limit(profile, row.key)
            if d[5] == 0 and r[5] == 0:
                continue
            label = row.label
            for word, value in names.items():
                label = label.replace(word, value)

            def cell(summary):
                text = ("> " if summary[6] else "") + fmt(summary[0])
                if row.calls and not math.isnan(summary[3]):
                    text += f" ({summary[3]:.0f})"
                return text

            limit_cell = fmt(limit) + (f" ({limit_text})" if limit_text else "")
            # A client that timed out gives a bound, and so does any ratio with it.
            versus = fmt(ratio(row, d[0], r[0]), 2)
            if r[6] != d[6] and versus != "–":
                versus = ("> " if r[6] else "< ") + versus
            versus_limit = ("< " if d[6] else "") + fmt(ratio(row, d[0], limit), 2)
            cpu_unit = "/GiB" if row.per_gib else ""
            lines.append(
                f"| {profile_labels[profile]} | {label}" + (f" ({row.calls} in parentheses)" if row.calls else "")
                + f" | {cell(d)} | {cell(r)} | {limit_cell if not math.isnan(limit) else '–'} "
                f"| {versus} | {versus_limit} "
                f"| {fmt(d[1], 2)} / {fmt(r[1], 2)}{cpu_unit} | {fmt(d[2])} / {fmt(r[2])} |")
    return "\n".join(lines)
