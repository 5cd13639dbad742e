"""``python -m fedgame``: the same command line as ``fedgame``."""

from fedgame.cli import app

app(prog_name="fedgame")
