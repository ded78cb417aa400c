"""pytest set-up for the Python package's tests: `headcount` must be importable (scripts/test.sh
puts <build>/python on PYTHONPATH; after `pip install .` it is installed), and tests/python is
on sys.path for the float64 oracle."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
