"""`python -m tunecache` runs the command line."""

import sys

from tunecache.cli import main

sys.exit(main())
