"""`--export`: which of the submitter's variables a job's tasks get."""

import pytest

from corral.client.exports import ExportError, exported

ENVIRON = {"HOME": "/home/a", "HF_HOME": "/data/hf", "CORRAL_TOKEN": "secret", "CORRAL_URL": "http://c",
           "BASH_FUNC_f%%": "() { :; }", "UNDECODABLE": "caf\udce9", "EMPTY": ""}


@pytest.mark.parametrize("selection", [None, "NONE", (), ["NONE"], " NONE "])
def test_none_exports_nothing(selection):
    assert exported(selection, ENVIRON) == {}


def test_all_exports_every_variable_a_task_can_be_given_but_corrals_own():
    assert exported("ALL", ENVIRON) == {"HOME": "/home/a", "HF_HOME": "/data/hf", "EMPTY": ""}
    assert exported(["ALL", "HOME"], ENVIRON) == exported("ALL", ENVIRON)


@pytest.mark.parametrize("selection", ["HOME,HF_HOME", ["HOME", "HF_HOME"], ["HOME,", " HF_HOME"]])
def test_names_export_those_variables(selection):
    assert exported(selection, ENVIRON) == {"HOME": "/home/a", "HF_HOME": "/data/hf"}


def test_a_mapping_is_taken_as_it_is():
    assert exported({"A": "1"}, ENVIRON) == {"A": "1"}


@pytest.mark.parametrize(("selection", "message"), [
    ("HOME=/x", "--export HOME=/x: give names only; set a value with --env HOME=/x"),
    ("A\0B", "--export 'A\\x00B': not an environment variable name"),
    ("1ABC", "--export '1ABC': not an environment variable name"),
    ("CORRAL_TOKEN", "--export CORRAL_TOKEN: CORRAL_* variables are corral's own; each task gets its own"),
    ("MISSING", "--export MISSING: not set in this environment"),
    (["NONE", "HOME"], "--export NONE exports nothing: it cannot be given with HOME"),
])
def test_a_bad_selection_is_refused_naming_it(selection, message):
    with pytest.raises(ExportError) as raised:
        exported(selection, ENVIRON)
    assert str(raised.value) == message
