"""Array files for :func:`posenc.verify.verify`: read and write ``.npy``, ``.npz`` and
``.safetensors`` as ``{name: Tensor}``.

A ``.npy`` file holds one array, named after the file's stem; ``.npz`` and ``.safetensors``
hold named arrays. ``safetensors`` is imported only when such a file is read or written, and
its absence gives a clear error. numpy files are read with ``allow_pickle=False``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["ARRAY_SUFFIXES", "load_arrays", "save_arrays"]

#: The file suffixes :func:`load_arrays` and :func:`save_arrays` accept.
ARRAY_SUFFIXES = (".npy", ".npz", ".safetensors")


def _suffix(path: Path, name: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in ARRAY_SUFFIXES:
        raise ValueError(f"{name} must end in one of {list(ARRAY_SUFFIXES)}, got {str(path)!r}")
    return suffix


def _safetensors_torch() -> Any:
    try:
        import safetensors.torch
    except ImportError:
        raise ValueError(
            "reading or writing .safetensors needs the safetensors package "
            "(pip install safetensors); or use .npz"
        ) from None
    return safetensors.torch


def load_arrays(path: str | Path) -> dict[str, Tensor]:
    """The named arrays of a ``.npy``, ``.npz`` or ``.safetensors`` file, as CPU tensors.

    Args:
        path: the file; a ``.npy`` array is named after the file's stem.

    Raises:
        ValueError: naming ``path`` when the suffix is unknown, the file is missing or
            unreadable, or an array's dtype has no torch equivalent.
    """
    path = Path(path)
    suffix = _suffix(path, "path")
    if not path.is_file():
        raise ValueError(f"path {str(path)!r} is not a file")
    if suffix == ".safetensors":
        return dict(_safetensors_torch().load_file(str(path), device="cpu"))
    import numpy as np

    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as error:
        raise ValueError(f"path {str(path)!r}: cannot read it as {suffix}: {error}") from None
    items = {path.stem: loaded} if suffix == ".npy" else dict(loaded.items())
    out = {}
    for key, value in items.items():
        try:
            out[key] = torch.from_numpy(np.ascontiguousarray(value))
        except TypeError:
            raise ValueError(
                f"array {key!r} in {str(path)!r} has dtype {value.dtype}, which torch cannot hold"
            ) from None
    return out


def save_arrays(arrays: Mapping[str, Tensor], path: str | Path) -> Path:
    """Write named tensors to ``path`` (``.npz``, ``.safetensors``, or ``.npy`` for one array).

    bfloat16 has no numpy dtype: numpy files store it as float32 (exact), safetensors as
    bfloat16.

    Returns:
        the path written.
    """
    path = Path(path)
    suffix = _suffix(path, "path")
    tensors = {key: value.detach().cpu().contiguous() for key, value in arrays.items()}
    if suffix == ".safetensors":
        _safetensors_torch().save_file(tensors, str(path))
        return path
    import numpy as np

    numpy_arrays = {
        key: (value.float() if value.dtype == torch.bfloat16 else value).numpy()
        for key, value in tensors.items()
    }
    if suffix == ".npy":
        if len(numpy_arrays) != 1:
            raise ValueError(
                f"a .npy file holds one array, got {sorted(numpy_arrays)}: use .npz or .safetensors"
            )
        np.save(path, next(iter(numpy_arrays.values())))
    else:
        np.savez(path, **numpy_arrays)  # type: ignore[arg-type]
    return path
