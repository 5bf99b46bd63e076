"""Growth of all-pairs hop distances with the graph's size:
``python benchmarks/graph_distances.py``.

Three families, each from 100 nodes up: paths (diameter N: the worst case for a search that
advances one hop per step), cycles, and random sparse graphs (``2N`` random edges: average
degree 4, self-loops and repeats kept, usually one giant component). For each size it times,
on one thread:

- ``bfs``: :func:`posenc.graph.hop_distances`, breadth-first search on the sparse edge list;
- ``dense``: the former ``hop_distances`` (one dense ``(N, N)`` boolean frontier product
  per hop, kept here as the tests' reference);
- ``floyd``: :func:`posenc.graph.shortest_paths` (distances and Graphormer's paths: by
  Floyd–Warshall when the table below was measured, by a search per source since; see
  ``benchmarks/graph_size.py``).

and prints the seconds and the growth exponent ``log(t2 / t1) / log(N2 / N1)`` between
consecutive sizes. A slow method stops before the size its last growth exponent plus one predicts
to take more than ``--limit`` seconds (default 10). The results are checked equal (``torch.equal``)
wherever two methods ran. The ``(N, N)`` int64 result takes ``8 N²`` bytes: 20,000 nodes
take 3.2 GB, 100,000 would take 80 GB; a size past ``MAX_RESULT_BYTES`` (4 GiB) is reported
as skipped with hop_distances' ``MemoryError`` (raised before allocating). ``--sizes``
picks the sizes, ``--json PATH`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable

import torch
from torch import Tensor

from posenc.graph import UNREACHABLE, Graph, hop_distances, shortest_paths
from posenc.graph.shortest_path import dense_edges

SIZES = (100, 300, 1000, 3000, 10000, 20000, 100000)


def dense_hop_distances(graph: Graph) -> Tensor:
    """The former ``hop_distances``: all sources at once, a ``(B, N, N)`` product per hop."""
    edge, _, node_mask = dense_edges(graph)
    batch, size, _ = edge.shape
    adjacency = edge.to(torch.float32)
    reached = torch.eye(size, dtype=torch.bool).expand(batch, size, size) & node_mask[:, :, None]
    distance = torch.full((batch, size, size), UNREACHABLE, dtype=torch.long)
    distance[reached] = 0
    frontier = reached
    for hop in range(1, size):
        frontier = (torch.bmm(frontier.to(torch.float32), adjacency) > 0) & ~reached
        if not bool(frontier.any()):
            break
        distance[frontier] = hop
        reached = reached | frontier
    return distance


def path_graph(n: int) -> Graph:
    return Graph(torch.stack([torch.arange(n - 1), torch.arange(1, n)]), n)


def cycle_graph(n: int) -> Graph:
    return Graph(torch.stack([torch.arange(n), (torch.arange(n) + 1) % n]), n)


def random_graph(n: int) -> Graph:
    generator = torch.Generator().manual_seed(n)
    return Graph(torch.randint(0, n, (2, 2 * n), generator=generator), n)


FAMILIES: dict[str, Callable[[int], Graph]] = {
    "path": path_graph,
    "cycle": cycle_graph,
    "random (degree 4)": random_graph,
}

METHODS: dict[str, Callable[[Graph], Tensor]] = {
    "bfs": hop_distances,
    "dense": dense_hop_distances,
    "floyd": lambda graph: shortest_paths(graph).distance,
}


def _timed(method: Callable[[Graph], Tensor], graph: Graph) -> tuple[float, Tensor]:
    start = time.perf_counter()
    out = method(graph)
    return time.perf_counter() - start, out


def run(sizes: tuple[int, ...], limit: float) -> list[dict[str, object]]:
    """One row per (family, method, size): seconds and the exponent from the previous size."""
    rows: list[dict[str, object]] = []
    for family, make in FAMILIES.items():
        stopped: set[str] = set()
        previous: dict[str, tuple[int, float]] = {}
        for index, n in enumerate(sizes):
            graph = make(n)
            results: dict[str, Tensor] = {}
            for method, function in METHODS.items():
                if method in stopped:
                    continue
                try:
                    seconds, results[method] = _timed(function, graph)
                except MemoryError as error:
                    print(f"{family:18s} {method:6s} N={n:6d} skipped: {error}", flush=True)
                    rows.append({"family": family, "method": method, "nodes": n, "skipped": True})
                    stopped.update(METHODS)
                    break
                exponent = None
                if method in previous:
                    n0, t0 = previous[method]
                    exponent = math.log(seconds / t0) / math.log(n / n0)
                previous[method] = (n, seconds)
                row = {"family": family, "method": method, "nodes": n, "seconds": seconds}
                rows.append({**row, "exponent": exponent})
                growth = "" if exponent is None else f"  growth N^{exponent:.2f}"
                print(f"{family:18s} {method:6s} N={n:6d} {seconds:9.3f} s{growth}", flush=True)
                following = sizes[index + 1] if index + 1 < len(sizes) else None
                growth_guess = max(exponent or 4.0, 2.0) + 1.0  # exponents rise with N
                too_slow = following and seconds * (following / n) ** growth_guess > limit
                if too_slow and method != "bfs":
                    stopped.add(method)
            for method, out in results.items():
                if "bfs" in results and not torch.equal(out, results["bfs"]):
                    raise AssertionError(f"{method} differs from bfs on {family}, N={n}")
            del results
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--limit", type=float, default=10.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"{platform.machine()} {platform.processor() or platform.platform()}, "
        f"{os.cpu_count()} cores, 1 thread, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = run(tuple(args.sizes), args.limit)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
