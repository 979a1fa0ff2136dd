"""``python -m learnerd`` runs the CLI."""

import sys

from learnerd.cmd.main import main

sys.exit(main())
