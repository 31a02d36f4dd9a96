"""`python -m tunecache` runs the command line."""

import sys

from tunecache.cli import run

sys.exit(run())
