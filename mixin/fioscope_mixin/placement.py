"""Where in the evaluation interval Prometheus starts each rule group (stack.place_rule_groups).

Prometheus starts a group at ``hash(name, file) mod interval`` after each multiple of its interval
(rules.Group.EvalTimestamp), the hash being xxHash64 of the group's two labels, ``file`` and ``name``, as its line
encodes a label set: Prometheus 3 prefixes each string with its length as a uvarint, Prometheus 2 ends each with
0xff (labels.Labels.Hash). Where
several of the per-device groups start within a second or two, they share the cores for as long as their sum: at
2,000 hosts on two cores, 5-8 groups starting together took 2-7 s each where they take under 1 s apart
(docs/fleet-bench.md). The layout is a matter of names, so this module picks them: every group of the evaluation
interval in the order its records flow (iostat's rates, the envelope that reads them, the stall, the causes, the
sustained alerts), each with a share of the interval in proportion to its cost, and the groups of longer intervals
(a whole number of evaluation intervals) in a slot of their own, spread over their intervals' turns. A placed group
is named ``<name>-<n>``: the first n whose hash lands within TOLERANCE of its point.

The file is part of the hash, so the placement holds where Prometheus reads the rule files by the path the
generator assumes, fioscope_mixin.stack.rule_file_path: relative to the directory of its prometheus.yml, Prometheus started there with a
relative --config.file (the native stack does, fioscope_mixin.native). Elsewhere (the Prometheus Operator names its
own files) the names are only names, and the groups start where their hash says, as without placement.
"""

from __future__ import annotations

from fioscope_mixin.stack import rule_file_path
from fioscope_mixin.units import parse_duration

# the groups of the evaluation interval in the order their records flow, and what one evaluation costs a core at
# 2,000 hosts x 4 devices, uncontended, in ms (bench/bench_rule_cost.py on a bench_fleet.py run's data): a group's
# share of the interval. LONG_SLOT_AFTER is where the groups of longer intervals go (the light part of the chain).
CHAIN_COST_MS = {
    "fioscope-iostat": 804, "fioscope-iostat-bytes": 213, "fioscope-iostat-util": 96, "fioscope-iostat-irate": 497,
    "fioscope-iostat-columns": 452, "fioscope-iostat-merges": 238, "fioscope-cpu": 501,
    "fioscope-envelope": 881, "fioscope-disk-step-down": 503, "fioscope-disk-stall": 394, "fioscope-disk-queue": 258,
    "fioscope-disk-recent-peak": 325, "fioscope-disk-guards": 203, "fioscope-cause-inputs": 300,
    "fioscope-cause-conditions": 138, "fioscope-cause": 863, "fioscope-alerts-sustained": 413,
    # every baseline_interval (1m), every fsync_histogram_interval (1m), every baseline_median_interval (3m)
    "fioscope-disk-baseline": 467, "fioscope-cause-demand": 198, "fioscope-disk-maxima": 149,
    "fioscope-fio-histogram": 77, "fioscope-disk-baseline-median": 24, "fioscope-disk-baseline-read-median": 31,
    "fioscope-disk-baseline-write-median": 24,
}
LONG_SLOT_AFTER = "fioscope-disk-queue"
TOLERANCE_S = 0.05
_MASK = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161, 9650029242287828579,
                           2870177450012600261)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def xxh64(data: bytes) -> int:
    """xxHash64 with seed 0 (github.com/cespare/xxhash, which Prometheus's label sets use)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(_P1 + _P2) & _MASK, _P2, 0, (-_P1) & _MASK]
        while i + 32 <= n:
            v = [_round(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little")) for k in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _MASK
    else:
        h = _P5
    h = (h + n) & _MASK
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[i:i + 8], "little")), 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (int.from_bytes(data[i:i + 4], "little") * _P1) & _MASK, 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * _P5) & _MASK, 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def phase_miss(at_s: float, point_s: float, interval_s: float) -> float:
    """How far ``at_s`` is from ``point_s``, both seconds into an interval of ``interval_s`` (it wraps round)."""
    miss = (at_s - point_s) % interval_s
    return min(miss, interval_s - miss)


def group_offset(name: str, file: str, interval_s: float, major: int = 3) -> float:
    """Seconds after each multiple of ``interval_s`` at which Prometheus ``major`` starts the group ``name`` of
    ``file``."""
    strings = (b"file", file.encode(), b"name", name.encode())
    data = b"".join(_uvarint(len(s)) + s for s in strings) if major >= 3 else b"".join(s + b"\xff" for s in strings)
    return (xxh64(data) % round(interval_s * 1e9)) / 1e9


def _named_at(name: str, file: str, interval_s: float, point_s: float, major: int) -> str:
    """``<name>-<n>``, the first n that Prometheus ``major`` starts within TOLERANCE_S of ``point_s`` into
    ``interval_s``."""
    n = 0
    while True:
        candidate = f"{name}-{n}"
        if phase_miss(group_offset(candidate, file, interval_s, major), point_s, interval_s) <= TOLERANCE_S:
            return candidate
        n += 1


def placement_points(files: dict[str, list[dict]], evaluation_interval: str) -> dict[str, tuple[float, float]]:
    """{group name: (its interval, the point of it where it should start)}, in seconds, for the groups placed.

    Groups of the evaluation interval in CHAIN_COST_MS form the chain, in file order; groups whose interval is a whole
    number k of evaluation intervals share one slot after LONG_SLOT_AFTER, each in the turn (0 .. k-1) with the least
    cost so far, costliest first; the slot is as long as its costliest turn. Any other group is not placed."""
    every = parse_duration(evaluation_interval)

    def interval_of(group: dict) -> float:
        return parse_duration(group["interval"]) if "interval" in group else every

    groups = [g for gs in files.values() for g in gs if g["name"] in CHAIN_COST_MS]
    chain = [g for g in groups if interval_of(g) == every]
    longer = [g for g in groups if interval_of(g) > every and (interval_of(g) / every).is_integer()]
    turns: dict[int, float] = {}  # turn (an evaluation interval of the longest) -> cost placed in it so far
    long_at: dict[str, tuple[int, float]] = {}  # group -> (turn, ms into the slot)
    for g in sorted(longer, key=lambda g: -CHAIN_COST_MS[g["name"]]):
        k = round(interval_of(g) / every)
        turn = min(range(k), key=lambda t: (turns.get(t, 0.0), t))
        long_at[g["name"]] = (turn, turns.get(turn, 0.0))
        turns[turn] = turns.get(turn, 0.0) + CHAIN_COST_MS[g["name"]]
    order = [(g["name"], float(CHAIN_COST_MS[g["name"]])) for g in chain]
    if long_at:
        after = next((i + 1 for i, (name, _) in enumerate(order) if name == LONG_SLOT_AFTER), len(order))
        order.insert(after, ("", max(turns.values())))
    total = sum(cost for _, cost in order)
    starts, t = {}, 0.0
    for name, cost in order:
        starts[name] = t
        t += cost * every / total
    points = {name: (every, starts[name]) for name, _ in order if name}
    intervals = {g["name"]: interval_of(g) for g in longer}
    for name, (turn, into) in long_at.items():
        points[name] = (intervals[name], turn * every + starts[""] + into * every / total)
    return points


def placed(files: dict[str, list[dict]], evaluation_interval: str, major: int = 3) -> dict[str, list[dict]]:
    """The groups of each rule file (keyed as fioscope_mixin.names.RULE_FILES), the placed ones renamed so that
    Prometheus ``major`` starts each at its point."""
    points = placement_points(files, evaluation_interval)
    return {file: [{**g, "name": _named_at(g["name"], rule_file_path(file), *points[g["name"]], major)} if g["name"] in points else g
                   for g in gs]
            for file, gs in files.items()}
