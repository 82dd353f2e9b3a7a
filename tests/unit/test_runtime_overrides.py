"""Choosing the Iceberg runtime and finding Java (no Spark started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.errors import SetupError
from cdclake.runtime.iceberg import require_java, resolve_iceberg_runtime


def test_maven_coordinates_win_over_jars(tmp_path: Path) -> None:
    # GIVEN Maven coordinates WHEN the runtime is resolved THEN only packages are used, no jar is built
    runtime = resolve_iceberg_runtime(
        tmp_path, maven_packages=("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0",)
    )
    assert runtime.packages == ("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0",)
    assert runtime.jars == ()
    assert list(tmp_path.iterdir()) == []


def test_an_official_runtime_jar_is_used_alone(tmp_path: Path) -> None:
    jar = tmp_path / "iceberg-spark-runtime-3.5_2.12-1.10.0.jar"
    jar.write_bytes(b"PK")
    assert resolve_iceberg_runtime(tmp_path / "cache", runtime_jar=jar).jars == (jar,)


def test_a_missing_runtime_jar_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match=r"The Iceberg runtime jar .*missing.jar does not exist\."):
        resolve_iceberg_runtime(tmp_path, runtime_jar=tmp_path / "missing.jar")


def test_the_pypi_runtime_gets_a_relocated_jackson_built_once(tmp_path: Path) -> None:
    # GIVEN an empty cache WHEN resolved twice
    first = resolve_iceberg_runtime(tmp_path)
    stamp = first.jars[1].stat().st_mtime_ns
    second = resolve_iceberg_runtime(tmp_path)
    # THEN the runtime jar plus the cached relocated Jackson jar, built only the first time
    assert first.jars[0].name == "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
    assert first.jars[1].parent == tmp_path
    assert second.jars[1].stat().st_mtime_ns == stamp


def test_missing_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # GIVEN no JAVA_HOME and no java on PATH
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    # WHEN Java is required THEN one sentence names what to install
    with pytest.raises(SetupError, match=r"^Java was not found: install a Java 17 runtime"):
        require_java()
