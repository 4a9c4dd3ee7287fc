"""``python -m foldexp …`` is the same as the ``foldexp`` command."""

import sys

from foldexp.cli import main

sys.exit(main())
