"""The README's Python quick start runs as written."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs_as_written(tmp_path, monkeypatch, capsys):
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quick start (Python)"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # it saves alice.npz in the working folder
    exec(compile(code, "README quick start", "exec"), {})
    assert (tmp_path / "alice.npz").exists()
    assert "Lisbon" in capsys.readouterr().out


def test_store_example_runs_as_written(tmp_path, monkeypatch):
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Many memories, on disk"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README store example", "exec"), scope)
    assert scope["hits"] and "Miso" in scope["hits"][0].text
    assert (tmp_path / "data" / "store.sqlite").exists()
