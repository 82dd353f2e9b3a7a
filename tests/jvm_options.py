"""The driver JVM options of every local Spark session a test process starts (imported first by the
Spark and AWS tests' conftest files).

The tests' sessions are short and their tables small: the JIT's first tier alone and the serial
collector start a session and plan its jobs about twice as fast as the default on 2 cores
(`CDCLAKE_JVM_OPTIONS`, read by the command line and the local Glue job shell; the Spark fixture
passes it too). A subprocess the tests start (the `cdclake` command, a local Glue job) inherits it.
"""

from __future__ import annotations

import os

# The first tier alone gets a 48 MB code cache by default, which a whole suite's generated Spark code fills:
# the sweeper then took a third of the JVM's time and compilation stopped. 512 MB is reserved, not committed.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=512m"
os.environ.setdefault("CDCLAKE_JVM_OPTIONS", TEST_JVM_OPTIONS)
