"""`python -m signoff`: the same as the `signoff` command."""

from signoff.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
