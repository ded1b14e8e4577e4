"""The part of the engine's context-parallel path that runs on a CPU: a rank's share of a
load-balanced sequence (two chunks, its positions jumping between them) as transformers
reads it. With the engine's all-ones mask SDPA gets `is_causal` and no mask, which ring
attention needs; with the positions alone (and no KV cache) transformers takes the jump
for a packed sequence and passes a mask (`fsdpspec_runners.engine.context`)."""

from __future__ import annotations

import pytest
import torch
import transformers

from fsdpspec.catalog.presets import preset_config
from fsdpspec_runners.engine.loss import SHIFTED_LABELS, causal_lm_loss, next_token_labels


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    config = transformers.LlamaConfig(**{k: v for k, v in preset_config("tiny-llama").items()
                                         if k not in ("architectures", "model_type")})
    config._attn_implementation = "sdpa"
    # Without a KV cache (use_cache: false, as many training configs say) transformers
    # reads the positions for packed sequences; with one it does not look.
    config.use_cache = False
    return transformers.LlamaForCausalLM(config).eval()


def _sdpa_masks(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool]]:
    """(got a mask, is_causal) of each SDPA call of one loss (the call torch's
    context_parallel replaces with ring attention)."""
    calls, real = [], torch.nn.functional.scaled_dot_product_attention

    def observed(*args, **kwargs):
        calls.append((kwargs.get("attn_mask") is not None, bool(kwargs.get("is_causal"))))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", observed)
    with torch.no_grad():
        causal_lm_loss(model, batch)
    return calls


def test_a_ranks_two_chunks_reach_sdpa_causal_without_a_mask(
        model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = torch.randint(0, 256, (1, 16))
    # Rank 0 of 2: chunks 0 and 3 of 4 (the head-tail balancer), labels shifted first.
    mine = torch.cat([torch.arange(0, 4), torch.arange(12, 16)])
    labels = next_token_labels({"input_ids": ids})
    share = {"input_ids": ids[:, mine], SHIFTED_LABELS: labels[:, mine],
             "position_ids": mine[None]}
    masked = _sdpa_masks(model, share, monkeypatch)
    assert masked and all(got_mask for got_mask, _ in masked)  # what the ones avoid
    share["attention_mask"] = torch.ones_like(share["input_ids"])
    assert set(_sdpa_masks(model, share, monkeypatch)) == {(False, True)}
