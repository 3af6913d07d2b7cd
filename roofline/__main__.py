"""``python -m roofline``: the command line."""

import sys

from .ui.cli import main

sys.exit(main())
