"""The README's REPL example is real output, and its two set-up commands are what CI runs."""

import doctest
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_examples_run():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "README.md", str(ROOT / "README.md"), 0)
    assert test.examples, "the README opens with a REPL example"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = 'python -m pip install -e ".[test]" && python -m pytest'
    assert command in readme
    # CI installs the test extra (and the ui extra beside it, for the web page's tests)
    assert re.search(r'python -m pip install -q -e "\.\[test(,\w+)*\]"', ci) and "python -m pytest" in ci
