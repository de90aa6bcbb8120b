"""python -m jaxcomm."""

import sys

from jaxcomm.cli import main

sys.exit(main())
