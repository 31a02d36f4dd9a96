"""`python -m tunecache.cli` runs the command line, as `python -m tunecache` does."""

import sys

from tunecache.cli import run

sys.exit(run())
