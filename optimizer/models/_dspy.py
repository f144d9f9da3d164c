"""What the dspy-based callers (the `llm` proposer, the LLM judges) share."""

from __future__ import annotations

from typing import Any

from optimizer.types import Usage


def dspy_lm(model: str, *, metadata: dict[str, Any], max_tokens: int, retry_attempts: int, temperature: float = 0.0,
            seed: int | None = None):
    """A dspy LM on `model` through litellm, with our providers registered first and dspy's own
    cache off (callers cache what they need in the store). `seed`, when given, is sent with every
    call (providers that sample by seed then reproduce)."""
    from optimizer.models import litellm_module, provider_of

    litellm_module()
    provider_of(model)  # a provider declared by an entry point registers before dspy asks litellm
    import dspy

    extra = {} if seed is None else {"seed": seed}
    return dspy.LM(model, cache=False, temperature=temperature, num_retries=retry_attempts, metadata=metadata,
                   max_tokens=max_tokens, **extra)


def lm_usage(lm) -> Usage:
    """Tokens and cost of the calls recorded in the LM's history (which is then cleared)."""
    total = Usage()
    for entry in lm.history:
        usage = entry.get("usage") or {}
        total.add(Usage(prompt_tokens=usage.get("prompt_tokens") or 0,
                        completion_tokens=usage.get("completion_tokens") or 0,
                        cost_usd=float(entry.get("cost") or 0.0), calls=1))
    lm.history.clear()
    return total
