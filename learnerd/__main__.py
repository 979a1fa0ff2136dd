"""``python -m learnerd`` runs the CLI."""

from learnerd.cmd.main import entry

entry()
