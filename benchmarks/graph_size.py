"""Graph structure at size, 100 to 100,000 nodes: ``python benchmarks/graph_size.py``.

For three families (paths: diameter N; 2-D grids of side √N; random sparse graphs with
``2N`` random edges, average degree 4, several components) and each size, one thread, this
times and measures the peak memory of

- ``hops``: :func:`posenc.graph.hop_distances` (breadth-first search, the ``(N, N)`` int64
  table);
- ``hops<=4``: the same with ``max_distance=4`` (the search stops after 4 hops);
- ``paths<=4``: :func:`posenc.graph.shortest_paths` with ``max_distance=4, cutoff=True``
  (distances, hops and Graphormer's paths of the pairs within 4 hops);
- ``paths``: :func:`posenc.graph.shortest_paths` in full (every pair's path);
- ``floyd``: the same through Floyd–Warshall (the route taken for weights whose sums are
  not exact), the former algorithm, while it stays under ``--limit``;
- ``lappe``: :func:`posenc.graph.laplacian_pe` with ``k = 8`` (sparse eigensolver past
  ``SPARSE_THRESHOLD`` nodes).

Each measurement runs in a fresh process: wall seconds of the call, and its peak resident
memory above the process's memory before the call (``ru_maxrss``). A method stops before
the size its last growth exponent (plus one) predicts past ``--limit`` seconds, and at a
``MemoryError``: the dense outputs are refused before allocating past 4 GiB (``N²`` int64
is 80 GB at 100,000 nodes whatever the cutoff: a cutoff shortens the search, not the table).
``--json PATH`` writes the rows; ``--sizes`` and ``--methods`` pick the runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from posenc.graph import Graph, hop_distances, laplacian_pe, shortest_paths

SIZES = (100, 300, 1000, 3000, 10000, 30000, 100000)
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def path_graph(n: int) -> Graph:
    return Graph(torch.stack([torch.arange(n - 1), torch.arange(1, n)]), n)


def grid_graph(n: int) -> Graph:
    side = max(1, math.isqrt(n))
    rows, cols = side, n // side  # n // side · side <= n nodes; the rest isolated
    ids = torch.arange(rows * cols).view(rows, cols)
    right = torch.stack([ids[:, :-1].reshape(-1), ids[:, 1:].reshape(-1)])
    down = torch.stack([ids[:-1].reshape(-1), ids[1:].reshape(-1)])
    return Graph(torch.cat([right, down], 1), n)


def random_graph(n: int) -> Graph:
    generator = torch.Generator().manual_seed(n)
    return Graph(torch.randint(0, n, (2, 2 * n), generator=generator), n)


FAMILIES: dict[str, Callable[[int], Graph]] = {
    "path": path_graph,
    "grid": grid_graph,
    "random": random_graph,
}


def _floyd(graph: Graph) -> object:
    import posenc.graph.shortest_path.paths as paths

    paths._exact_sums = lambda cost: False
    return shortest_paths(graph)


METHODS: dict[str, Callable[[Graph], object]] = {
    "hops": hop_distances,
    "hops<=4": lambda g: hop_distances(g, max_distance=4),
    "paths<=4": lambda g: shortest_paths(g, max_distance=4, cutoff=True),
    "paths": shortest_paths,
    "floyd": _floyd,
    "lappe": lambda g: laplacian_pe(g, 8),
}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_one(family: str, method: str, n: int) -> dict[str, object]:
    """One call in this process: seconds and peak memory above the memory before it."""
    torch.set_num_threads(1)
    graph = FAMILIES[family](n)
    before = _rss_bytes()
    start = time.perf_counter()
    try:
        out = METHODS[method](graph)
    except MemoryError as error:
        return {"skipped": str(error)}
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    del out
    return {"seconds": seconds, "peak_bytes": max(peak, 0)}


def run(sizes: list[int], methods: list[str], limit: float) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for family in FAMILIES:
        for method in methods:
            previous: tuple[int, float] | None = None
            for n in sizes:
                if previous is not None:
                    (n0, t0), exponent = previous, 3.0
                    last = [r for r in rows if r["family"] == family and r["method"] == method]
                    if len(last) >= 2 and "seconds" in last[-2]:
                        exponent = math.log(t0 / float(last[-2]["seconds"])) / math.log(
                            n0 / int(last[-2]["nodes"])  # type: ignore[call-overload]
                        )
                    if t0 * (n / n0) ** (max(exponent, 1.0) + 1.0) > limit:
                        print(f"{family:7s} {method:9s} N={n:6d} stopped (predicted > {limit} s)")
                        break
                command = [sys.executable, __file__, "--one", family, method, str(n)]
                env = {**os.environ, **ONE_THREAD}  # numpy's and scipy's BLAS too
                done = subprocess.run(command, capture_output=True, check=True, text=True, env=env)
                result = json.loads(done.stdout.splitlines()[-1])
                row = {"family": family, "method": method, "nodes": n, **result}
                rows.append(row)
                if "skipped" in result:
                    print(f"{family:7s} {method:9s} N={n:6d} skipped: {result['skipped']}")
                    break
                seconds, peak = float(result["seconds"]), int(result["peak_bytes"])
                print(f"{family:7s} {method:9s} N={n:6d} {seconds:9.3f} s {peak / 2**20:9.1f} MiB",
                      flush=True)  # fmt: skip
                previous = (n, seconds)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--limit", type=float, default=60.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--one", nargs=3, metavar=("FAMILY", "METHOD", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        family, method, n = args.one
        print(json.dumps(measure_one(family, method, int(n))))
        return
    import scipy

    print(
        f"python {platform.python_version()}, torch {torch.__version__}, scipy "
        f"{scipy.__version__}, {platform.machine()} {platform.processor() or platform.platform()}"
        f", {os.cpu_count()} cores, 1 thread, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = run(args.sizes, args.methods, args.limit)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
