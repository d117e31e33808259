"""A path the user names is checked as a path: refused before a scenario runs, and an error on it is reported
as the file's, not as a server the command "cannot connect" to."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sluice_dev.cli import error_code, main, one_line


@pytest.mark.parametrize("where", ["missing/dir/run.html", "."])
def test_scenario_html_into_a_missing_folder_or_onto_a_folder_is_refused_before_the_run(
        tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice_dev.chaos import scenarios

    def must_not_run(*_a: object, **_k: object) -> None:
        raise AssertionError("the scenario ran before its --html path was checked")

    monkeypatch.setattr(scenarios, "gc_pause", must_not_run)
    path = tmp_path / where
    result = CliRunner().invoke(main, ["scenario", "gc-pause", "--html", str(path)])
    assert result.exit_code == 2, result.output
    assert "--html" in result.output
    assert ("no folder" in result.output) if where != "." else ("is a folder" in result.output)


def test_an_error_on_a_file_names_the_file_and_a_refused_connection_still_says_connect() -> None:
    missing = FileNotFoundError(2, "No such file or directory", "/nonexistent/x.html")
    assert one_line(missing) == "No such file or directory: /nonexistent/x.html"
    assert error_code(missing) == "FILE_ERROR"
    refused = ConnectionRefusedError(111, "Connection refused")
    assert one_line(refused).startswith("cannot connect:") and error_code(refused) == "CANNOT_CONNECT"
