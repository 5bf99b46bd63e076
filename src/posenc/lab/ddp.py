"""The torchrun LM trainer: ``python -m posenc.lab.ddp`` trains the small byte-level LM on the
embedded corpus; under ``torchrun`` every process runs it and they share the global batch::

    torchrun --nproc_per_node 2 -m posenc.lab.ddp --out runs/ddp --pos rope --steps 200

The same command without torchrun trains in one process with the same losses. Process-group
helpers live in :mod:`posenc.lab.distributed`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
import torch.distributed as dist

from posenc.lab.distributed import init_distributed

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.lab.ddp",
        description="Train the small byte-level LM on the embedded corpus (torchrun-ready).",
    )
    parser.add_argument("--out", required=True, help="run folder (resumes if it holds a run)")
    parser.add_argument("--pos", default="rope", help="encoding name (see `posenc list`)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max-bytes", type=int, default=2_000_000, help="cap per split")
    parser.add_argument("--eval-windows", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry of ``python -m posenc.lab.ddp`` / ``torchrun ... -m posenc.lab.ddp``."""
    from posenc.lab.data import LMSource, eval_windows, load_corpus
    from posenc.lab.train import TrainConfig, lm_loss, train
    from posenc.model import DecoderLM, ModelConfig

    args = _parser().parse_args(argv)
    rank, world_size = init_distributed()
    corpus = load_corpus(seed=args.seed, max_bytes=args.max_bytes)
    source = LMSource(corpus.train, args.seq_len, seed=args.seed)
    windows = eval_windows(corpus.validation, args.seq_len, args.eval_windows)
    config = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        device=args.device,
        progress=not args.no_progress,
    )
    model_config = ModelConfig(
        vocab_size=256,
        dim=args.dim,
        depth=args.depth,
        num_heads=args.heads,
        pos=args.pos,
        max_seq_len=args.seq_len,
    )
    torch.manual_seed(args.seed)
    model = DecoderLM(model_config)

    def evaluate(model: torch.nn.Module, step: int) -> dict[str, float]:
        from posenc.lab.batch import Batch

        device = next(model.parameters()).device
        batch = Batch(windows[:, :-1], windows[:, 1:], torch.ones_like(windows[:, 1:]).bool())
        batch = batch.to(device)
        return {"val_loss": float(lm_loss(model(batch.tokens), batch))}

    result = train(model, source, config, args.out, evaluate=evaluate)
    if rank == 0:
        print(
            f"world_size {world_size}: final loss {result.final_loss:.4f}, "
            f"{result.tokens_per_second:,.0f} tokens/s, {result.seconds:.1f} s -> {args.out}"
        )
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
