"""``python -m agentsession``: the command line (the ``cli`` extra installs what it needs)."""

from ._cli_entry import main

if __name__ == "__main__":
    main()
