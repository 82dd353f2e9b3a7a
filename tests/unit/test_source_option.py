"""One connection format: init, capture and verify take the same source (a URL or a libpq string),
from the same option and environment variable; the old names keep working."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cdclake.shells.cli import build_parser, main
from cdclake.sources.catalog.connect import SourceAddress, libpq_dsn, parse_source
from cdclake.sources.catalog.model import SourceCatalogError
from cdclake.sources.postgres.settings import without_password
from local_databases import free_port

COMMANDS = ("init", "capture", "verify")


@pytest.fixture(autouse=True)
def _no_source_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCLAKE_SOURCE", raising=False)
    monkeypatch.delenv("CDCLAKE_PG_DSN", raising=False)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("option", ["--source", "--dsn"])
def test_every_command_takes_the_source_under_both_names(command: str, option: str) -> None:
    # GIVEN a source given with the new option name or the old one
    source = "postgresql://reader@db:5432/shop"
    # WHEN init, capture or verify parses it THEN each holds it in the same place
    assert build_parser().parse_args([command, option, source]).source == source


@pytest.mark.parametrize("variable", ["CDCLAKE_SOURCE", "CDCLAKE_PG_DSN"])
def test_every_command_reads_the_same_environment_variable(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the source in the new variable, or only in the old one capture and verify read
    monkeypatch.setenv(variable, "host=db dbname=shop user=reader")
    # WHEN each command is parsed without an option THEN each takes it
    assert {build_parser().parse_args([c]).source for c in COMMANDS} == {"host=db dbname=shop user=reader"}


def test_the_new_variable_wins_over_the_old_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCLAKE_PG_DSN", "host=old")
    monkeypatch.setenv("CDCLAKE_SOURCE", "host=new")
    assert build_parser().parse_args(["capture"]).source == "host=new"


def test_a_libpq_string_is_a_postgres_address() -> None:
    # GIVEN a libpq key=value string with a quoted password and an extra setting
    text = "host=db.internal port=6543 dbname=shop user=reader password='a b\\'c' sslmode=require"
    # WHEN init reads it THEN it is the same address the URL form gives
    address = parse_source(text)
    assert address == SourceAddress(
        "postgres", "db.internal", 6543, "shop", "reader", "a b'c", (("sslmode", "require"),)
    )
    url = parse_source("postgresql://reader:secret@db.internal:6543/shop?sslmode=require")
    assert url == replace(address, password="secret")
    # AND without host and port they are libpq's defaults
    assert (parse_source("dbname=shop").host, parse_source("dbname=shop").port) == ("localhost", 5432)


@pytest.mark.parametrize("text", ["host=db port=five", "host=db 'dangling", "host=db password='open"])
def test_a_bad_libpq_string_is_one_sentence_without_the_password(text: str) -> None:
    with pytest.raises(SourceCatalogError) as caught:
        parse_source(text)
    assert "\n" not in str(caught.value) and "open" not in str(caught.value)


def test_capture_and_verify_give_libpq_what_it_reads() -> None:
    # GIVEN each accepted form THEN libpq gets a string it reads (jdbc: dropped), the others unchanged
    assert libpq_dsn("") == ""
    assert libpq_dsn("host=db dbname=shop") == "host=db dbname=shop"
    assert libpq_dsn("postgresql://u@db/shop") == "postgresql://u@db/shop"
    assert libpq_dsn("postgres:///shop") == "postgres:///shop"  # a Unix socket: libpq's to resolve
    assert libpq_dsn("jdbc:postgresql://db:5432/shop") == "postgresql://db:5432/shop"
    # AND another engine's URL is refused with one sentence, without its password
    with pytest.raises(SourceCatalogError, match="PostgreSQL only") as caught:
        libpq_dsn("mysql://root:secret@db/shop")
    assert "secret" not in str(caught.value)


def test_init_reaches_the_server_a_libpq_string_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a libpq string for a loopback port nothing listens on
    port = free_port()
    # WHEN init is given it THEN it tried that server (it did not refuse the form) and wrote nothing
    code = main(["-q", "--config", str(tmp_path / "c.yaml"), "init", "--source", f"host=127.0.0.1 port={port}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"cdclake: Cannot connect to PostgreSQL at 127.0.0.1:{port} (database default): nothing listens there: "
        "start the server, or fix the host and port in --source.\n"
    ), err
    assert not (tmp_path / "c.yaml").exists()


def test_capture_refuses_another_engine_before_connecting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the MySQL URL init accepts WHEN capture is given it THEN one sentence, exit 2, nothing written
    code = main(["--config", str(tmp_path / "c.yaml"), "--bronze", str(tmp_path / "b"), "capture",
                 "--source", "mysql://root@127.0.0.1/shop", "--state-dir", str(tmp_path / "s")])  # fmt: skip
    assert code == 2 and "PostgreSQL only" in capsys.readouterr().err
    assert not (tmp_path / "b").exists() and not (tmp_path / "s").exists()


def test_messages_never_show_the_password() -> None:
    assert without_password("host=db password=secret user=u") == "host=db password=*** user=u"
    assert without_password("host=db password='a b' user=u") == "host=db password=*** user=u"
    assert without_password("postgresql://u:secret@db/shop") == "postgresql://u:***@db/shop"
    assert without_password("") == "PG* environment"
