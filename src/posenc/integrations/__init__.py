"""Bridges to other libraries. :mod:`posenc.integrations.hf`: HF ``transformers`` interop.

Nothing here imports the other library at import time; each function imports it when it
needs it and raises :class:`ImportError` with the install hint otherwise.
"""
