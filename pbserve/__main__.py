"""`python -m pbserve`: the same as the `pbserve` command."""

import sys

from pbserve.cli import main

sys.exit(main())
