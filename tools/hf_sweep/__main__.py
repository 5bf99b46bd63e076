"""``python -m tools.hf_sweep``: see :func:`tools.hf_sweep.sweep.main`."""

from tools.hf_sweep.sweep import main

main()
