"""The byte-level tokenizer's vocabulary (used when `data.tokenizer` is null): ids
0–255 are the UTF-8 bytes, 256 ends a document. The engine encodes with it; the lint
rules check that the model's vocabulary holds it."""

BYTE_EOS = 256
BYTE_VOCAB = BYTE_EOS + 1
