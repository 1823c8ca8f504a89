"""The README's configuration reference lists every setting, as `fleetpilot config` prints it."""

from __future__ import annotations

from pathlib import Path

from services.cli.config import reference_rows

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_documents_every_setting() -> None:
    text = README.read_text()
    missing = [env for _, env, _, _ in reference_rows() if f"`{env}`" not in text]
    assert not missing, f"README lacks {missing}: paste `fleetpilot config` into its configuration reference"


def test_readme_gives_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text
