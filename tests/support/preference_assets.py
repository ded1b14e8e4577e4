"""A preference set the tests build: prompts over the chat tokenizer's words
(`chat_assets`), each with the one fixed answer as the chosen completion and a few random
words as the rejected one, so the chosen is learnable. Nothing is downloaded."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from chat_assets import ANSWER, QUESTION, WORDS


def preference_record(rng: random.Random, *, chat: bool = False) -> dict[str, Any]:
    """A prompt (random context, then the fixed question), the fixed answer as chosen and
    random words as rejected; as text, or as chat messages."""
    context = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    rejected = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))
    prompt = f"{context} {QUESTION}"
    if chat:
        return {"prompt": [{"role": "user", "content": prompt}],
                "chosen": [{"role": "assistant", "content": ANSWER}],
                "rejected": [{"role": "assistant", "content": rejected}]}
    return {"prompt": prompt, "chosen": f" {ANSWER}", "rejected": f" {rejected}"}


def preference_jsonl(path: Path, count: int, *, seed: int = 0, chat: bool = False) -> Path:
    """``count`` preference records as one jsonl file."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(preference_record(rng, chat=chat)) + "\n"
                            for _ in range(count)))
    return path
