"""A process whose clock is off: `time.time` shifted by SIGNOFF_TEST_CLOCK_SKEW_S seconds.

Put this directory first on a test process's PYTHONPATH (Python imports `sitecustomize` at
start); Redis and the other processes keep the real clock.
"""

import os
import time

_skew = float(os.environ.get("SIGNOFF_TEST_CLOCK_SKEW_S", "0"))
if _skew:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _skew
    time.time_ns = lambda: _time_ns() + int(_skew * 1e9)
