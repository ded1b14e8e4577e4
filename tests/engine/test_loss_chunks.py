"""The chunked loss against the plain one, in one process: the same value and gradients
with masked labels and packed positions, a Mixture of Experts' load-balancing loss and
transformers' final soft-capping."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from fsdpspec.catalog.presets import preset_config  # noqa: E402
from fsdpspec_runners.engine.examples import IGNORE  # noqa: E402
from fsdpspec_runners.engine.loss import causal_lm_loss  # noqa: E402

GEMMA2 = {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 320, "final_logit_softcapping": 30.0}


def _model(config: dict) -> torch.nn.Module:
    values = {k: v for k, v in config.items() if k != "architectures"}
    built = AutoConfig.for_model(**values)
    built.use_cache = False
    built.output_router_logits = True  # as the engine asks of a Mixture of Experts
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(built)


def _loss_and_grads(model: torch.nn.Module, batch: dict, chunks: int) -> tuple[float, list]:
    model.zero_grad()
    loss = causal_lm_loss(model, batch, chunks=chunks)
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("config", [preset_config("tiny-llama"), preset_config("tiny-mixtral"),
                                    GEMMA2], ids=["llama", "mixtral-aux-loss", "gemma2-softcap"])
def test_chunked_loss_equals_the_plain_loss(config: dict) -> None:
    model = _model(config)
    ids = torch.randint(0, 320, (2, 24), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, :5] = IGNORE  # a masked prompt
    positions = torch.cat([torch.arange(10), torch.arange(14)]).repeat(2, 1)  # two packed
    batch = {"input_ids": ids, "labels": labels, "position_ids": positions}
    plain, plain_grads = _loss_and_grads(model, batch, chunks=1)
    chunked, chunked_grads = _loss_and_grads(model, batch, chunks=5)  # uneven: 48 = 5 × 10 - 2
    assert abs(chunked - plain) <= 1e-6 * abs(plain)
    for a, b in zip(chunked_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    # The model's own projection and soft-capping are back after the chunked call.
    assert model.get_output_embeddings().forward.__self__ is model.get_output_embeddings()
    assert getattr(model.config, "final_logit_softcapping", None) == config.get(
        "final_logit_softcapping")
