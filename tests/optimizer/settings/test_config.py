

def test_a_mock_run_judges_with_a_mock_unless_a_judge_model_is_asked_for(tmp_path, monkeypatch):
    """The PKM suite on mock/sim used to start (or join) the embedded model for its judges."""
    from optimizer.settings.config import DEFAULT_MODEL
    from optimizer.settings.loading import load_settings

    for name in ("OPTIMIZER_AGENT_MODEL", "OPTIMIZER_JUDGE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert load_settings(tmp_path, {"agent_model": "mock/sim"}).judge_model == "mock/sim"
    assert load_settings(tmp_path).judge_model == DEFAULT_MODEL
    assert load_settings(tmp_path, {"agent_model": "mock/sim", "judge_model": DEFAULT_MODEL}).judge_model == DEFAULT_MODEL
    monkeypatch.setenv("OPTIMIZER_JUDGE_MODEL", "openai/gpt-4.1-mini")
    assert load_settings(tmp_path, {"agent_model": "mock/sim"}).judge_model == "openai/gpt-4.1-mini"
