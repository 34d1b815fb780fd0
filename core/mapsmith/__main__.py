"""``python -m mapsmith``: the same as the ``mapsmith`` command."""

import sys

from mapsmith.cli import main

sys.exit(main())
