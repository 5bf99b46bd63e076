"""``python -m posenc.lab.experiments NAME [--out DIR] OPTIONS``: ``posenc lab NAME`` after
joining the process group that ``torchrun`` describes, so the same command scales out::

    torchrun --nproc_per_node 2 -m posenc.lab.experiments lm --out runs/lm --encodings rope

Without torchrun it is ``posenc lab NAME``. (The entry is the package's, not each
experiment module's: the registry imports every experiment, so ``python -m`` on one of them
would run a second copy of a module already imported.)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch.distributed

from posenc.lab.command import experiment_main
from posenc.lab.distributed import init_distributed
from posenc.lab.experiments import EXPERIMENTS, get_experiment

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the experiment named by the first argument with the rest (alone or under
    ``torchrun``); the exit status (2 with a usage line for a missing or unknown name)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in EXPERIMENTS:
        print(
            "usage: python -m posenc.lab.experiments NAME [--out DIR] OPTIONS; "
            f"NAME is one of {', '.join(EXPERIMENTS)}",
            file=sys.stderr,
        )
        return 2
    _, world_size = init_distributed()
    try:
        return experiment_main(get_experiment(args[0]), args[1:])
    finally:
        if world_size > 1:
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(main())
