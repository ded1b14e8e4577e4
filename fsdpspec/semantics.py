"""The byte-level tokenizer's vocabulary (used when `data.tokenizer` is null): ids
0–255 are the UTF-8 bytes, 256 ends a document. The engine encodes with it; the lint
rules check that the model's vocabulary holds it."""

BYTE_EOS = 256
BYTE_VOCAB = BYTE_EOS + 1


def checkpoints_written(interval_steps: int, max_steps: int) -> int:
    """How many checkpoints a run that is not interrupted writes: one every
    `interval_steps` steps and one at the last step (the engine's loop); none when
    `interval_steps` is 0, where only a stop by a signal saves."""
    if interval_steps == 0:
        return 0
    return max_steps // interval_steps + (1 if max_steps % interval_steps else 0)
