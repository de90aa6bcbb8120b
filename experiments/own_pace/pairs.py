"""The own-pace study's saved pairs (one (condition, method) each, every seed's curve): which seeds a pair holds, a pair
read at some of them, and a pair extended by more seeds."""

from __future__ import annotations

PER_SEED = ("ticks", "curves", "due_share")
"""A pair's lists with one entry per seed, in the order of its ``seeds``."""


GIT_COMMITS = "git_commits"
"""A pair's ``{str(seed): commit}``: the commit each seed trained at (pairs saved before it was recorded lack it)."""


def seeds_of(pair: dict) -> list[int]:
    """The seeds a saved pair holds (pairs saved before seeds were recorded hold the cpu preset's 0, 1, 2)."""
    return list(pair.get("seeds", range(len(pair["ticks"]))))


def stopped_seed(message: str) -> int:
    """The seed a ``stopped`` message names (``"seed 2: diverged: ..."``)."""
    return int(message.split(":", 1)[0].split()[1])


def with_seeds(pair: dict, seeds: list[int]) -> dict:
    """``pair`` restricted to ``seeds`` (each of which it holds), in that order."""
    held = seeds_of(pair)
    index = [held.index(seed) for seed in seeds]
    kept = {key: [pair[key][i] for i in index] for key in PER_SEED}
    stopped = [m for m in pair.get("stopped", ()) if stopped_seed(m) in seeds]
    commits = {k: v for k, v in pair.get(GIT_COMMITS, {}).items() if int(k) in seeds}
    return {k: v for k, v in pair.items() if k not in ("stopped", GIT_COMMITS)} | kept | {"seeds": list(seeds)} | (
        {"stopped": stopped} if stopped else {}) | ({GIT_COMMITS: commits} if commits else {})


def merged(pair: dict, more: dict) -> dict:
    """A saved pair and a pair of further seeds of the same condition and method, as one (seeds in order)."""
    seeds = seeds_of(pair) + seeds_of(more)
    lists = {key: pair[key] + more[key] for key in PER_SEED}
    stopped = list(pair.get("stopped", ())) + list(more.get("stopped", ()))
    order = sorted(range(len(seeds)), key=seeds.__getitem__)
    commits = pair.get(GIT_COMMITS, {}) | more.get(GIT_COMMITS, {})
    return pair | {key: [lists[key][i] for i in order] for key in PER_SEED} | {
        "seeds": [seeds[i] for i in order], "seconds": pair["seconds"] + more["seconds"]} | (
        {"stopped": sorted(stopped, key=stopped_seed)} if stopped else {}) | (
        {GIT_COMMITS: dict(sorted(commits.items(), key=lambda kv: int(kv[0])))} if commits else {})
