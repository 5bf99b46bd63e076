"""``python -m posenc.cli``: the ``posenc`` command."""

from posenc.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
