"""`optimizer nightly` on a PostgreSQL store shared by two machines (two state folders): the
server's lock keeps the second job out until the first lets go, then the night runs there."""

from __future__ import annotations

from optimizer import gitops
from optimizer.nightly.lock import repository_identity
from tests.end_to_end.test_nightly import nightly
from tests.helpers import FACT_RULE, after_data_line, optimizer_branches, script
from tests.optimizer.nightly.test_lock import hold_in_store


def test_a_job_on_another_machine_holding_the_store_lock_keeps_the_night_out(cli, repo, isolated, tmp_path,
                                                                             monkeypatch, postgres_url):
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", postgres_url)
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    holder = hold_in_store(postgres_url, tmp_path / "other-machine", repository_identity(gitops.open_repo(repo)))
    try:
        code, summary, output = nightly(cli, tmp_path)
        assert code == 2 and summary == {}, output
        assert f"another job (optimizer nightly) is running on this repository: pid {holder.pid}" in output
        assert optimizer_branches(repo) == []
        assert not (isolated / "nightly.lock").exists()  # the lock is the server's, not a file here
    finally:
        holder.stdin.close()
        holder.wait(30)

    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "1")
    assert code == 0, output
    assert [row["status"] for row in summary["iterations"]] == ["accepted"], output
    assert not (isolated / "optimizer.db").exists()  # every record went to the server
