"""README's Benchmark lines and the configs' header lines, typed and checked as
tests/test_readme_lines.py types README's other lines (its PLAN, its checks), from an empty working
directory of their own (none of them reads what another line wrote).

A file of their own so that `-n 2 --dist loadfile` can give them to the other worker: with every
line in one file, that file was 724 s of its worker's 769 s, and the suite waited on it alone.
"""

import pytest

from tests.readme_lines import Run
from tests.test_readme_lines import before_the_benchmarks, planned, type_and_check


@pytest.mark.parametrize("command", **planned(Run, lambda source: not before_the_benchmarks(source)))
def test_a_documented_line_runs_and_does_what_it_says(command, workdir, joining_environment):
    type_and_check(command, workdir, joining_environment)
