"""Provision the Iceberg Spark runtime for local runs, from PyPI alone (no Maven needed).

The runtime jar comes from the ``snowpark-connect-deps-iceberg`` wheel. It lacks the relocated
Jackson classes Iceberg links against, so the Jackson jars PySpark ships are relocated once into
``<cache>/iceberg-shaded-jackson-<version>.jar`` and reused afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from cdclake.errors import SetupError
from cdclake.runtime.jar_relocation import Relocation, relocate_jars

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
JACKSON_VERSION = "2.15.2"
JACKSON_ARTIFACTS = ("annotations", "core", "databind", "datatype-jsr310")
JACKSON_RELOCATION = Relocation(
    source="com.fasterxml.jackson", target="org.apache.iceberg.shaded.com.fasterxml.jackson"
)
# Bump when the relocation logic changes so stale cached jars are rebuilt.
_RELOCATION_REVISION = "1"


@dataclass(frozen=True)
class IcebergRuntime:
    """What Spark needs to load Iceberg: local jars and/or Maven coordinates."""

    jars: tuple[Path, ...] = ()
    packages: tuple[str, ...] = ()


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(
            f"The Python package '{module}' is missing; run `make setup` to install the pinned dependencies."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def require_java() -> Path:
    """Return the java executable Spark will use, or explain in one sentence what to install."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    if candidate is not None and candidate.exists():
        return candidate
    found = shutil.which("java")
    if found is None:
        raise SetupError(
            "Java was not found: install a Java 17 runtime (for example "
            "`apt-get install openjdk-17-jre-headless` or `brew install openjdk@17`) "
            "or set JAVA_HOME."
        )
    return Path(found)


def shaded_jackson_jar(cache_dir: Path) -> Path:
    """Build (once) and return the Jackson jar relocated to Iceberg's shaded package."""
    target = cache_dir / f"iceberg-shaded-jackson-{JACKSON_VERSION}-r{_RELOCATION_REVISION}.jar"
    if target.exists():
        return target
    pyspark_jars = _package_dir("pyspark") / "jars"
    sources = [pyspark_jars / f"jackson-{name}-{JACKSON_VERSION}.jar" for name in JACKSON_ARTIFACTS]
    missing = [str(s) for s in sources if not s.exists()]
    if missing:
        raise SetupError(
            f"PySpark does not ship the expected Jackson {JACKSON_VERSION} jars ({', '.join(missing)}); "
            "install the pinned pyspark version with `make setup`."
        )
    return relocate_jars(sources, target, JACKSON_RELOCATION)


def resolve_iceberg_runtime(
    cache_dir: Path, runtime_jar: Path | None = None, maven_packages: tuple[str, ...] = ()
) -> IcebergRuntime:
    """Pick the Iceberg runtime: Maven coordinates, an official jar, or the PyPI repack + Jackson.

    An official ``iceberg-spark-runtime`` jar already contains its shaded Jackson, so it is used
    alone; the PyPI repack needs the relocated Jackson next to it.
    """
    if maven_packages:
        return IcebergRuntime(packages=maven_packages)
    if runtime_jar is not None:
        if not runtime_jar.is_file():
            raise SetupError(f"The Iceberg runtime jar {runtime_jar} does not exist.")
        return IcebergRuntime(jars=(runtime_jar,))
    bundled = _package_dir("snowpark_connect_deps_iceberg") / "jars" / ICEBERG_RUNTIME_JAR
    if not bundled.exists():
        raise SetupError(f"{bundled} is missing; install the pinned snowpark-connect-deps-iceberg with `make setup`.")
    return IcebergRuntime(jars=(bundled, shaded_jackson_jar(cache_dir)))
