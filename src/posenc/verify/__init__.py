"""``posenc verify``: check a port's RoPE against posenc's float64 reference, and name the bug.

Given a model config and what an implementation produced (cos/sin tables, rotated q/k, M-RoPE
position ids), :func:`verify` computes posenc's float64 reference for the same layer type,
reports where and by how much the arrays differ, and names the likely cause from a catalogue
of known bug classes (:data:`BUG_CLASSES`: layout, partial width, per-layer parameters,
scaling semantics, M-RoPE axes and sections, offsets, bfloat16 tables), each with its public
sources. :func:`reference_arrays` writes the reference for offline comparison. See
``docs/verify.md`` for the tolerance rule and the catalogue.

* ``spec``: the config read once (:class:`RopeSpec`) and its angles;
* ``reference``: the float64 arrays;
* ``variants``: how each bug computes (:class:`Case`, :class:`Variant`);
* ``catalogue``: the bug classes;
* ``compare``: tolerances and per-array reports;
* ``diagnose``: :func:`verify`; ``report``: :class:`VerifyReport`;
* ``arrays``: ``.npy`` / ``.npz`` / ``.safetensors`` files.

Example::

    >>> cfg = {"head_dim": 8, "rope_theta": 100.0}
    >>> ref = reference_arrays(cfg, torch.arange(4))
    >>> verify(cfg, {"cos": ref["cos"].float(), "sin": ref["sin"].float()}).ok
    True
"""

from __future__ import annotations

from posenc.verify.arrays import load_arrays, save_arrays
from posenc.verify.catalogue import BUG_CLASSES, BugClass, bug_class
from posenc.verify.compare import KeyReport
from posenc.verify.diagnose import ARRAY_KEYS, verify
from posenc.verify.reference import reference_arrays
from posenc.verify.report import VerifyReport
from posenc.verify.spec import RopeSpec, rope_spec
from posenc.verify.variants import Case, Variant

__all__ = [
    "ARRAY_KEYS",
    "BUG_CLASSES",
    "BugClass",
    "Case",
    "KeyReport",
    "RopeSpec",
    "Variant",
    "VerifyReport",
    "bug_class",
    "load_arrays",
    "reference_arrays",
    "rope_spec",
    "save_arrays",
    "verify",
]
