"""``python -m lakepurge.cli``: the ``lakepurge`` command."""

import sys

from lakepurge.cli import main

sys.exit(main())
