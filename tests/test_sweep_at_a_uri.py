"""The PBT sweep of tests/test_sweep.py with its experiment directory at a URI on moto's S3 server:
Tune's state, every trial's run directory and each learner's replay there, the exploit, Ctrl-C and
`--resume` read and written through it. A file of its own so that `-n 2 --dist loadfile` can give
it to the other worker than the local sweep's."""

from tests.s3_server import uri
from tests.test_sweep import (
    test_a_pbt_exploit_carries_the_donor_exactly_and_ctrl_c_then_resume_finish_the_sweep as sweep,
)


def test_a_pbt_sweep_at_an_s3_uri_exploits_stops_and_resumes_there(s3_server, tmp_path, joining_environment, capsys,
                                                                    monkeypatch):
    sweep(tmp_path, joining_environment, capsys, monkeypatch, uri(s3_server, "runs/exp"))
