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
something to follow that a static one computed once does not.
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

__all__ = ["TemporalEvents", "debian_changelog_events", "drifting_communities"]


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
    check_positive_int("num_nodes", num_nodes)
    check_positive_int("steps", steps)
    check_positive_int("events_per_step", events_per_step)
    check_positive_int("period", period)
    check_non_negative_int("seed", seed)
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
