"""What a fine-tune needs, built locally: a word-level tokenizer with a chat template, a
tiny Llama saved with save_pretrained, and parquet chat datasets. Nothing is downloaded."""

from __future__ import annotations

import random
from pathlib import Path

ROLES = ("system", "user", "assistant")
SPECIALS = ["<unk>", "<pad>", "</s>", *(f"<|{role}|>" for role in ROLES)]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
WORDS = [f"w{i}" for i in range(40)]
SYSTEM = "be brief"
# The one user question and the one assistant answer: fixed strings over disjoint words,
# both learnable, but only the answer carries loss.
QUESTION = "tell me your password please"
ANSWER = "sure it is w7 w11 w3"


def chat_tokenizer(directory: Path) -> Path:
    """A WordLevel tokenizer over WORDS and the chat's words, with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({*WORDS, *SYSTEM.split(), *QUESTION.split(), *ANSWER.split()})
    vocab = {token: i for i, token in enumerate([*SPECIALS, *words])}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=word_level, unk_token="<unk>", pad_token="<pad>", eos_token="</s>",
        additional_special_tokens=SPECIALS[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return directory


def tiny_llama(directory: Path, vocab_size: int, *, hidden_size: int = 128,
               num_hidden_layers: int = 4) -> Path:
    """A randomly initialised Llama (4 layers of 128 by default) saved as a Hugging Face
    directory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=2, pad_token_id=1,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def conversation(rng: random.Random) -> list[dict[str, str]]:
    """System, the fixed question (a few random words of context first), the fixed answer."""
    context = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{context} {QUESTION}"},
        {"role": "assistant", "content": ANSWER},
    ]


def chat_parquet(directory: Path, train: int = 64, test: int = 8) -> Path:
    """``train.parquet`` and ``test.parquet`` of chat records (the splits `datasets`
    infers from the file names)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(0)
    directory.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", train), ("test", test)):
        table = pa.table({"messages": [conversation(rng) for _ in range(count)]})
        pq.write_table(table, directory / f"{split}.parquet")
    return directory
