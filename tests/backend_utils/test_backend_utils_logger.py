"""Logger: caller file:line, runtime routing, glog-format fallback on stderr."""

import os
import re

import pytest

import backend_utils as pb
from backend_utils.testing import FakeRuntime, installed

GLOG = re.compile(r"^([IWE])(\d{4}) (\d\d:\d\d:\d\d\.\d{6}) (\d+) (\S+):(\d+)\] (.*)$")


def test_levels_match_triton():
    assert [pb.Logger.INFO, pb.Logger.WARNING, pb.Logger.ERROR, pb.Logger.VERBOSE] == [0, 1, 2, 3]
    assert pb.Logger.LogLevel.WARNING is pb.Logger.WARNING


def test_log_reports_the_callers_file_and_line_to_the_runtime():
    with installed(FakeRuntime()) as rt:
        pb.Logger.log("hello")
        line = _line_of('pb.Logger.log("hello")')
        pb.Logger.log("careful", pb.Logger.WARNING)
        pb.Logger.log_info("i")
        pb.Logger.log_warn("w")
        pb.Logger.log_error("e")
        pb.Logger.log_verbose("v")
    assert rt.logs[0] == (0, "hello", __file__, line)
    assert [(level, msg) for level, msg, _, _ in rt.logs[1:]] == [
        (1, "careful"), (0, "i"), (1, "w"), (2, "e"), (3, "v")]
    assert all(filename == __file__ for _, _, filename, _ in rt.logs)
    assert rt.logs[3][3] == line + 4  # log_warn's own caller line


def test_without_runtime_lines_go_to_stderr_in_glog_format(capsys):
    pb.Logger.log_warn("disk almost full")
    line = _line_of('pb.Logger.log_warn("disk almost full")')
    err = capsys.readouterr().err.strip()
    match = GLOG.match(err)
    assert match, err
    letter, _, _, pid, filename, lineno, message = match.groups()
    assert (letter, int(pid), filename, int(lineno), message) == (
        "W", os.getpid(), os.path.basename(__file__), line, "disk almost full")
    pb.Logger.log_error("e")
    pb.Logger.log_info("i")
    letters = [ln[0] for ln in capsys.readouterr().err.splitlines()]
    assert letters == ["E", "I"]


def test_verbose_needs_the_env_var_outside_a_model(capsys, monkeypatch):
    monkeypatch.delenv("PBSERVE_LOG_VERBOSE", raising=False)
    pb.Logger.log_verbose("quiet")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PBSERVE_LOG_VERBOSE", "1")
    pb.Logger.log_verbose("loud")
    assert capsys.readouterr().err.startswith("I")


def test_log_rejects_bad_arguments():
    with pytest.raises(TypeError):
        pb.Logger.log(42)
    with pytest.raises(TypeError):
        pb.Logger.log("x", 9)


def _line_of(snippet):
    with open(__file__) as handle:
        for number, text in enumerate(handle, 1):
            if snippet in text and "_line_of" not in text:
                return number
    raise AssertionError(snippet)
