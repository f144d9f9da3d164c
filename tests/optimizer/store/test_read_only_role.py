"""docs/postgresql.md offers a read-only role for the commands that only read the team's store:
they work with it, and a command that writes stops with the server's refusal, exit 3."""

from __future__ import annotations

import psycopg


def _database(url: str) -> str:
    return url.split("@/")[1].split("?")[0]


def test_the_reading_commands_work_with_a_read_only_role(cli, postgres_server, postgres_url, monkeypatch, tmp_path):
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", postgres_url)
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/sim", "--trials", "1")
    assert code == 0, out + err
    database = _database(postgres_url)
    with psycopg.connect(host=str(postgres_server.folder), port=postgres_server.port, user="postgres",
                         dbname=database, autocommit=True) as conn:
        for statement in ("CREATE ROLE optimizer_reader LOGIN", f"GRANT CONNECT ON DATABASE {database} TO optimizer_reader",
                          "GRANT USAGE ON SCHEMA public TO optimizer_reader",
                          "GRANT SELECT ON ALL TABLES IN SCHEMA public TO optimizer_reader"):
            conn.execute(statement)
    reader = postgres_url.replace("postgres@/", "optimizer_reader@/")
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", reader)
    code, out, err = cli("history", "--json", str(tmp_path / "history.json"))
    assert code == 0, out + err
    assert (tmp_path / "history.json").exists()
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/sim", "--trials", "1")
    assert code == 3, out + err
    assert "permission denied" in (out + err).lower()
