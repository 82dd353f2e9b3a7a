"""Package relocation in class files and jars, checked on real classes compiled with javac and run with java."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from cdclake.runtime.jar_relocation import (
    ClassFileError,
    Relocation,
    list_class_names,
    relocate_class,
    relocate_jars,
    utf8_constants,
)

JACKSON = Relocation("com.fasterxml.jackson", "org.apache.iceberg.shaded.com.fasterxml.jackson")
OLD_SLASHED, OLD_DOTTED = "com/fasterxml/jackson", "com.fasterxml.jackson"
NEW_SLASHED = "org/apache/iceberg/shaded/com/fasterxml/jackson"
NEW_DOTTED = "org.apache.iceberg.shaded.com.fasterxml.jackson"
MAIN = "com.fasterxml.jackson.demo.Main"
RELOCATED_MAIN = f"{NEW_DOTTED}.demo.Main"

# Main holds the class name as a string constant, a field of another class of its package, Long and
# Double constants (two constant-pool slots each) and a string concatenation (invokedynamic).
MAIN_JAVA = """
package com.fasterxml.jackson.demo;

public class Main {
    static final String NAME = "com.fasterxml.jackson.demo.X";
    static long big = 1234567890123L;
    static double ratio = 2.5e10;
    X helper = new X();

    public static void main(String[] args) throws Exception {
        System.out.println(NAME);
        System.out.println(Class.forName(NAME).getName());
        System.out.println(new Main().helper.describe());
        System.out.println(big + " " + ratio);
    }
}
"""
X_JAVA = """
package com.fasterxml.jackson.demo;

public class X {
    public String describe() {
        return "helper " + getClass().getName();
    }
}
"""
EXPECTED_OUTPUT = [
    f"{NEW_DOTTED}.demo.X",
    f"{NEW_DOTTED}.demo.X",
    f"helper {NEW_DOTTED}.demo.X",
    "1234567890123 2.5E10",
]


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The compiled demo classes: jar entry name (``com/fasterxml/jackson/demo/Main.class``) -> bytes."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("the JDK (javac and java) is not on PATH")
    src = tmp_path_factory.mktemp("java-src")
    out = tmp_path_factory.mktemp("java-classes")
    (src / "Main.java").write_text(MAIN_JAVA, encoding="utf-8")
    (src / "X.java").write_text(X_JAVA, encoding="utf-8")
    subprocess.run(
        ["javac", "--release", "17", "-d", str(out), str(src / "Main.java"), str(src / "X.java")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.class"))}


def run_java(classpath: Path, main: str) -> list[str]:
    result = subprocess.run(
        ["java", "-cp", str(classpath), main], check=True, capture_output=True, text=True, timeout=120
    )
    return result.stdout.splitlines()


def write_jar(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as jar:
        for name, data in entries.items():
            jar.writestr(name, data)
    return path


# --------------------------------------------------------------------------- Relocation


def test_rewrite_text_slashed_and_dotted() -> None:
    # GIVEN a descriptor (slashed) and a class name (dotted)
    # WHEN / THEN both spellings move under the target package
    assert (JACKSON.rewrite_text("Lcom/fasterxml/jackson/core/JsonParser;"), JACKSON.rewrite_text(MAIN)) == (
        f"L{NEW_SLASHED}/core/JsonParser;",
        RELOCATED_MAIN,
    )


def test_rewrite_text_leaves_other_names() -> None:
    # GIVEN a name outside the package
    # WHEN / THEN it is unchanged
    assert JACKSON.rewrite_text("java/lang/String") == "java/lang/String"


def test_rewrite_text_only_moves_names_under_the_package() -> None:
    # GIVEN a package that merely starts with the same letters
    # WHEN / THEN it is not under the relocated package and stays put
    assert JACKSON.rewrite_text("com.fasterxml.jacksonx.Y") == "com.fasterxml.jacksonx.Y"


# --------------------------------------------------------------------------- relocate_class


def test_compiled_class_refers_to_the_old_package(classes: dict[str, bytes]) -> None:
    # GIVEN the compiled Main class
    # WHEN its UTF-8 constants are read
    constants = utf8_constants(classes["com/fasterxml/jackson/demo/Main.class"])
    # THEN it names its own class, the field type and the string constant in the old package
    assert {"com/fasterxml/jackson/demo/Main", "Lcom/fasterxml/jackson/demo/X;", f"{OLD_DOTTED}.demo.X"} <= set(
        constants
    )


def test_relocated_class_has_no_old_package_left(classes: dict[str, bytes]) -> None:
    # GIVEN the compiled Main class
    # WHEN it is relocated
    constants = utf8_constants(relocate_class(classes["com/fasterxml/jackson/demo/Main.class"], JACKSON))
    # THEN no constant names the old package outside the relocated one, in either spelling
    leftovers = [
        c for c in constants if OLD_SLASHED in c.replace(NEW_SLASHED, "") or OLD_DOTTED in c.replace(NEW_DOTTED, "")
    ]
    assert leftovers == []


def test_relocated_class_names_the_new_package(classes: dict[str, bytes]) -> None:
    # GIVEN the compiled Main class
    # WHEN it is relocated
    constants = set(utf8_constants(relocate_class(classes["com/fasterxml/jackson/demo/Main.class"], JACKSON)))
    # THEN its own name, the field type and the string constant are in the new package
    assert {f"{NEW_SLASHED}/demo/Main", f"L{NEW_SLASHED}/demo/X;", f"{NEW_DOTTED}.demo.X"} <= constants


def test_relocated_class_keeps_other_constants(classes: dict[str, bytes]) -> None:
    # GIVEN the compiled Main class
    data = classes["com/fasterxml/jackson/demo/Main.class"]
    # WHEN it is relocated
    relocated = utf8_constants(relocate_class(data, JACKSON))
    # THEN the constants are the same list with only the package moved
    assert relocated == [JACKSON.rewrite_text(c) for c in utf8_constants(data)]


def test_unrelated_relocation_copies_bytes(classes: dict[str, bytes]) -> None:
    # GIVEN a relocation of a package the class never mentions
    data = classes["com/fasterxml/jackson/demo/Main.class"]
    # WHEN the class is relocated / THEN it is byte-for-byte the same
    assert relocate_class(data, Relocation("org.example.none", "shaded.org.example.none")) == data


def test_relocated_classes_load_and_run(classes: dict[str, bytes], tmp_path: Path) -> None:
    # GIVEN both classes relocated and written under their relocated paths
    for name, data in classes.items():
        target = tmp_path / JACKSON.rewrite_path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(relocate_class(data, JACKSON))
    # WHEN the relocated Main runs on a real JVM
    output = run_java(tmp_path, RELOCATED_MAIN)
    # THEN it loads, resolves its relocated helper and prints the relocated string constant
    assert output == EXPECTED_OUTPUT


def test_not_a_class_file() -> None:
    # GIVEN bytes that are a zip header, not a class
    # WHEN / THEN relocation refuses them
    with pytest.raises(ClassFileError, match="bad magic number"):
        relocate_class(b"PK\x03\x04" + b"\x00" * 40, JACKSON)


def test_too_short_for_a_class_file() -> None:
    # GIVEN four bytes of magic and nothing else
    # WHEN / THEN relocation refuses them
    with pytest.raises(ClassFileError, match="bad magic number"):
        relocate_class(b"\xca\xfe\xba\xbe", JACKSON)


def test_unknown_constant_pool_tag() -> None:
    # GIVEN a class header whose first constant has tag 99
    data = struct.pack(">IHHH", 0xCAFEBABE, 0, 61, 2) + bytes([99, 0, 0])
    # WHEN / THEN the tag and its offset are reported
    with pytest.raises(ClassFileError, match=r"^unknown constant-pool tag 99 at byte 10$"):
        relocate_class(data, JACKSON)


def test_truncated_class_file(classes: dict[str, bytes]) -> None:
    # GIVEN a real class file cut after 40 bytes, inside its constant pool
    data = classes["com/fasterxml/jackson/demo/Main.class"][:40]
    # WHEN / THEN it is reported as an unreadable class file
    with pytest.raises(ClassFileError):
        relocate_class(data, JACKSON)


def test_utf8_constant_longer_than_the_data() -> None:
    # GIVEN a class header whose only constant declares 100 bytes of text but holds 5
    data = struct.pack(">IHHH", 0xCAFEBABE, 0, 61, 2) + bytes([1]) + struct.pack(">H", 100) + b"hello"
    # WHEN / THEN it is reported as an unreadable class file
    with pytest.raises(ClassFileError):
        relocate_class(data, JACKSON)


# --------------------------------------------------------------------------- relocate_jars


@pytest.fixture
def relocated_jar(classes: dict[str, bytes], tmp_path: Path) -> Path:
    """Two input jars merged and relocated into ``tmp_path/out/shaded.jar``."""
    first = write_jar(
        tmp_path / "first.jar",
        {
            "META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\n",
            "META-INF/LICENSE": b"first license",
            "META-INF/services/com.fasterxml.jackson.demo.X": b"com.fasterxml.jackson.demo.X\n",
            "module-info.class": b"not even a class file",
            "META-INF/versions/9/com/fasterxml/jackson/demo/X.class": b"not even a class file",
            "com/fasterxml/": b"",  # a directory entry
            **classes,
        },
    )
    second = write_jar(
        tmp_path / "second.jar",
        {"META-INF/LICENSE": b"second license", "com/fasterxml/jackson/demo/readme.txt": b"hello"},
    )
    return relocate_jars([first, second], tmp_path / "out" / "shaded.jar", JACKSON)


def test_relocate_jars_entry_names(relocated_jar: Path) -> None:
    # GIVEN / WHEN two jars are merged with the Jackson relocation
    with zipfile.ZipFile(relocated_jar) as jar:
        names = sorted(jar.namelist())
    # THEN entries move; directories, module-info and multi-release entries are dropped; duplicates appear once
    assert names == sorted(
        [
            "META-INF/MANIFEST.MF",
            "META-INF/LICENSE",
            f"META-INF/services/{NEW_DOTTED}.demo.X",
            f"{NEW_SLASHED}/demo/Main.class",
            f"{NEW_SLASHED}/demo/X.class",
            f"{NEW_SLASHED}/demo/readme.txt",
        ]
    )


def test_relocate_jars_keeps_the_first_duplicate(relocated_jar: Path) -> None:
    # GIVEN / WHEN two jars with their own LICENSE are merged
    with zipfile.ZipFile(relocated_jar) as jar:
        license_text = jar.read("META-INF/LICENSE")
    # THEN the first jar's copy is kept
    assert license_text == b"first license"


def test_relocate_jars_rewrites_service_files(relocated_jar: Path) -> None:
    # GIVEN / WHEN a ServiceLoader file is relocated
    with zipfile.ZipFile(relocated_jar) as jar:
        provider = jar.read(f"META-INF/services/{NEW_DOTTED}.demo.X")
    # THEN the provider it names is relocated too
    assert provider == f"{NEW_DOTTED}.demo.X\n".encode()


def test_relocate_jars_copies_other_files_unchanged(relocated_jar: Path) -> None:
    # GIVEN / WHEN a resource file is relocated
    with zipfile.ZipFile(relocated_jar) as jar:
        data = jar.read(f"{NEW_SLASHED}/demo/readme.txt")
    # THEN only its path moved
    assert data == b"hello"


def test_relocate_jars_lists_relocated_classes(relocated_jar: Path) -> None:
    # GIVEN / WHEN the merged jar's classes are listed
    # THEN they are in the relocated package
    assert sorted(list_class_names(relocated_jar)) == [RELOCATED_MAIN, f"{NEW_DOTTED}.demo.X"]


def test_relocate_jars_leaves_no_partial_file(relocated_jar: Path) -> None:
    # GIVEN / WHEN the merge has finished
    # THEN only the final jar is in the output directory
    assert sorted(p.name for p in relocated_jar.parent.iterdir()) == ["shaded.jar"]


def test_relocated_jar_runs(relocated_jar: Path) -> None:
    # GIVEN / WHEN the merged jar is put on a real JVM's class path
    output = run_java(relocated_jar, RELOCATED_MAIN)
    # THEN the relocated program runs
    assert output == EXPECTED_OUTPUT
