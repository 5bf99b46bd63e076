"""Progress of a training run: a tqdm bar when installed and wanted, else a printed line per
log step (what :func:`posenc.lab.train.train` shows)."""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["Progress"]


class Progress:
    """A bar over ``total`` steps starting at ``start``; nothing at all unless ``show``.

    :meth:`update` advances one step and, with a train record, shows its loss and tokens/s.
    """

    def __init__(self, total: int, start: int, show: bool) -> None:
        self.show, self.total, self.bar = show, total, None
        if show:
            with contextlib.suppress(ImportError):
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, initial=start, desc="train", unit="step")

    def update(self, step: int, record: dict[str, Any] | None) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if record is not None:
                speed = record["time"]["tokens_per_second"]
                self.bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{speed:,.0f}")
        elif self.show and record is not None:
            print(
                f"step {step}/{self.total} loss {record['loss']:.4f} lr {record['lr']:.2e} "
                f"tok/s {record['time']['tokens_per_second']:,.0f}",
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
