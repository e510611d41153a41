"""python3 -m det.pytorch.run MODULE:CLASS (det.pytorch.run.main)."""

import sys

from det.pytorch.run import main

sys.exit(main())
