"""python -m linarena.arena attention=<name> [--budget quick|standard|full]: see main.py."""

import sys

from linarena.arena.main import main

sys.exit(main())
