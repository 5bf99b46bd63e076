"""Timed edge streams for temporal link prediction, made on the machine.

**Debian changelogs** (:func:`debian_changelog_events`): every Debian system keeps each
installed package's ``changelog.Debian.gz`` under ``/usr/share/doc``; each entry names the
source package, its version and, on its closing line, who uploaded it and when
(`` -- Name <email>  Mon, 02 Jan 2023 13:06:21 +0100``). An entry is one event: the uploader
(by e-mail address, lower-cased) → the source package, at the upload's time. Binary packages
of one source share its changelog, so entries are kept once per (source, version). The
result is a bipartite temporal graph of people and packages, real and offline (about 32,000
events on a typical desktop; what this machine holds is what the experiment reports).

**Drifting communities** (:func:`drifting_communities`): a synthetic stream with known
dynamics: ``num_nodes`` nodes in ``communities`` groups; at each step ``events_per_step``
edges join two random members of one random group; every ``period`` steps a fraction
``drift`` of the nodes moves to another group. A node's structural position (its group)
changes at known times, so an encoding that follows positions over time (L-STEP) has
something to follow that a static one computed once does not. :func:`period_communities`
reads the groups back from the links of each period (its connected components).

:func:`chronological_split` cuts a stream into training, validation and test events by time,
as DyGLib does (70 / 15 / 15 %).
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path

import torch
from torch import Tensor

from posenc._validate import check_non_negative_int, check_positive_int

__all__ = [
    "TemporalEvents",
    "chronological_split",
    "debian_changelog_events",
    "drifting_communities",
    "period_communities",
]


@dataclass(frozen=True)
class TemporalEvents:
    """Events ``src[i] → dst[i]`` at ``time[i]`` (non-decreasing), node ids ``0 ..
    num_nodes - 1``; ``names`` says what each node is."""

    src: Tensor  # (E,) int64
    dst: Tensor  # (E,) int64
    time: Tensor  # (E,) float64
    num_nodes: int
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        e = self.src.shape[0]
        if self.dst.shape != (e,) or self.time.shape != (e,):
            raise ValueError("src, dst and time must be (E,) tensors of one length")
        if e and bool((self.time.diff() < 0).any()):
            raise ValueError("time must be non-decreasing: events come in time order")
        if len(self.names) != self.num_nodes:
            raise ValueError(f"names must name each of the {self.num_nodes} nodes")

    def __len__(self) -> int:
        return int(self.src.shape[0])


_HEADER = re.compile(r"^(?P<source>[a-z0-9][a-z0-9+.-]*) \((?P<version>[^)]+)\)")
_TRAILER = re.compile(r"^ -- (?P<name>.*?) <(?P<email>[^>]+)>\s+(?P<date>.+?)\s*$")


def debian_changelog_events(root: str | Path = "/usr/share/doc") -> TemporalEvents:
    """Uploader → source package events from the ``changelog.Debian.gz`` files under
    ``root`` (see the module); ``ValueError`` naming ``root`` when it holds none."""
    seen: set[tuple[str, str]] = set()
    raw: list[tuple[float, str, str]] = []
    files = sorted(Path(root).glob("*/changelog.Debian.gz"))
    for path in files:
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        except (OSError, EOFError):  # a truncated or unreadable file is skipped, not fatal
            continue
        entry: tuple[str, str] | None = None
        for line in text.splitlines():
            header = _HEADER.match(line)
            if header:
                entry = (header["source"], header["version"])
                continue
            trailer = _TRAILER.match(line)
            if trailer and entry is not None:
                if entry not in seen:
                    try:
                        when = parsedate_to_datetime(trailer["date"]).timestamp()
                    except (TypeError, ValueError, IndexError):
                        when = None
                    if when is not None:
                        seen.add(entry)
                        raw.append((when, "person:" + trailer["email"].lower(), entry[0]))
                entry = None
    if not raw:
        raise ValueError(f"root {str(root)!r} holds no readable */changelog.Debian.gz")
    raw.sort()
    names: dict[str, int] = {}
    for _, person, source in raw:
        names.setdefault(person, len(names))
        names.setdefault("package:" + source, len(names))
    src = torch.tensor([names[p] for _, p, _ in raw])
    dst = torch.tensor([names["package:" + s] for _, _, s in raw])
    time = torch.tensor([t for t, _, _ in raw], dtype=torch.float64)
    return TemporalEvents(src, dst, time, len(names), tuple(names))


def drifting_communities(
    *,
    num_nodes: int = 200,
    communities: int = 8,
    steps: int = 400,
    events_per_step: int = 20,
    period: int = 50,
    drift: float = 0.25,
    seed: int = 0,
) -> TemporalEvents:
    """The synthetic stream of the module: step ``s`` has time ``s``."""
    num_nodes = check_positive_int("num_nodes", num_nodes)
    steps = check_positive_int("steps", steps)
    events_per_step = check_positive_int("events_per_step", events_per_step)
    period = check_positive_int("period", period)
    seed = check_non_negative_int("seed", seed)
    if not 2 <= communities <= num_nodes // 2:
        raise ValueError(f"communities must lie in [2, num_nodes // 2], got {communities}")
    if not 0.0 <= drift <= 1.0:
        raise ValueError(f"drift must lie in [0, 1], got {drift}")
    generator = torch.Generator().manual_seed(seed)
    group = torch.arange(num_nodes) % communities
    src, dst, time = [], [], []
    for step in range(steps):
        if step and step % period == 0:
            moving = torch.rand(num_nodes, generator=generator) < drift
            shift = torch.randint(1, communities, (num_nodes,), generator=generator)
            group = torch.where(moving, (group + shift) % communities, group)
        for _ in range(events_per_step):
            g = int(torch.randint(communities, (1,), generator=generator))
            members = (group == g).nonzero().flatten()
            if members.numel() < 2:
                continue
            pick = torch.randperm(members.numel(), generator=generator)[:2]
            src.append(int(members[pick[0]]))
            dst.append(int(members[pick[1]]))
            time.append(float(step))
    return TemporalEvents(
        torch.tensor(src),
        torch.tensor(dst),
        torch.tensor(time, dtype=torch.float64),
        num_nodes,
        tuple(f"node{i}" for i in range(num_nodes)),
    )


def chronological_split(times: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Train, validation and test masks of events at ``times``, cut at the 70 % and 85 %
    quantiles (DyGLib, Yu et al. 2023: ``t ≤ q70``, ``q70 < t ≤ q85``, ``t > q85``; events at
    one time stay on one side)."""
    cuts = torch.tensor([0.70, 0.85], dtype=torch.float64)
    q70, q85 = torch.quantile(times.to(torch.float64), cuts)
    return times <= q70, (times > q70) & (times <= q85), times > q85


def _components(num_nodes: int, src: list[int], dst: list[int]) -> Tensor:
    """Each node's connected component (its smallest node id) under the links ``(src, dst)``:
    union-find with path halving."""
    parent = list(range(num_nodes))

    def root(u: int) -> int:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for u, v in zip(src, dst, strict=True):
        a, b = root(u), root(v)
        parent[max(a, b)] = min(a, b)
    return torch.tensor([root(u) for u in range(num_nodes)])


def period_communities(events: TemporalEvents, period: int) -> dict[int, Tensor]:
    """The communities of each period ``p = ⌊t / period⌋`` of a stream, read from its links:
    ``{p: (num_nodes,) labels}``, a node's label the smallest node id of its connected
    component among the period's links, -1 for a node without a link in the period.

    On :func:`drifting_communities` (links only inside a group; groups fixed within a period)
    these are the groups, wherever a period's links connect each group (1,000 links over
    groups of 25 nodes at the defaults).
    """
    period = check_positive_int("period", period)
    index = torch.div(events.time, period, rounding_mode="floor").long()
    found = {}
    for p in torch.unique(index).tolist():
        inside = index == p
        src, dst = events.src[inside], events.dst[inside]
        labels = _components(events.num_nodes, src.tolist(), dst.tolist())
        linked = torch.zeros(events.num_nodes, dtype=torch.bool)
        linked[src] = True
        linked[dst] = True
        found[int(p)] = torch.where(linked, labels, -1)
    return found
