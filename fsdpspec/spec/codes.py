"""The FS0xx codes: problems found while reading a spec (file, YAML, schema, models),
before any lint rule runs. `fsdpspec explain FS0xx` reads them from here, as it reads
the lint rules' codes from their registry; a test keeps every code the loader, schema
check and validator emit listed here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsdpspec.spec.diagnostics import Severity


@dataclass(frozen=True)
class LoadCode:
    code: str
    name: str
    summary: str
    doc: str
    # How it is reported: most stop the file; a few are said and the work goes on.
    severity: Severity = Severity.ERROR


def _codes(*rows: tuple[Any, ...]) -> dict[str, LoadCode]:
    return {row[0]: LoadCode(*row) for row in rows}


LOAD_CODES = _codes(
    ("FS001", "unreadable-file", "the spec cannot be read",
     "No such file, a directory, a FIFO or device, or an OS error while reading. Specs are "
     "read only from regular files."),
    ("FS002", "file-too-large", "the spec is larger than 1 MiB",
     "A job spec is a page of YAML; the limit keeps a wrong path (a dataset, a checkpoint) "
     "from being parsed."),
    ("FS003", "not-utf8", "the spec is not UTF-8 text",
     "Binary content (NUL bytes), another encoding (UTF-16/32, Latin-1) or an invalid byte. "
     "Save the file as UTF-8."),
    ("FS004", "yaml-syntax", "the YAML does not parse",
     "A syntax error at the position shown: an unclosed bracket or quote, a bad indent, a "
     "stray character."),
    ("FS005", "empty-file", "the spec is empty",
     "The file holds no document. `fsdpspec init` writes a starting spec."),
    ("FS006", "several-documents", "the file holds more than one YAML document",
     "A spec is one document; `---` separates several. Keep one spec per file."),
    ("FS007", "not-a-mapping", "the document is not a mapping of fields",
     "The top level must be a mapping (apiVersion, kind, metadata, …), not a list or a "
     "scalar."),
    ("FS008", "duplicate-key", "a key appears twice in one mapping",
     "YAML would silently keep the last value; fsdpspec refuses the ambiguity and shows "
     "where the key was first defined."),
    ("FS009", "alias-bomb", "aliases expand the document beyond the node limit",
     "Anchors and aliases that expand exponentially (a 'billion laughs' document), or an "
     "alias that contains itself."),
    ("FS010", "tag-not-allowed", "a YAML tag or merge key is not allowed",
     "Tags (`!!python/object`, custom `!tags`) and merge keys (`<<`) are refused: a spec is "
     "plain data."),
    ("FS011", "key-not-string", "a mapping key is not a string",
     "Keys such as `1`, `true` or `null` parse as numbers, booleans or null. Quote the key."),
    ("FS012", "tab-indent", "a tab is used for indentation",
     "YAML indents with spaces only; replace the tab."),
    ("FS013", "api-version", "apiVersion is missing or unsupported",
     "Every spec starts with `apiVersion: fsdpspec/v1`; the message lists the supported "
     "versions."),
    ("FS014", "kind", "kind is not TrainingJob",
     "Write `kind: TrainingJob`."),
    ("FS015", "too-deep", "nesting deeper than the limit",
     "Mappings and lists nested deeper than any spec needs."),
    ("FS016", "bad-scalar", "a number or tagged scalar cannot be read",
     "An integer beyond Python's digit limit (decimal or hex), a float that overflows, or a "
     "tag that contradicts its value (`!!int abc`, `!!bool x`, `!!float x`)."),
    ("FS017", "reused-anchor", "a YAML anchor is defined twice",
     "`&name` written a second time: every alias after it names the second value, the ones "
     "before it the first, so one `*name` reads two ways. Give each anchor its own name."),
    ("FS020", "unknown-field", "a field that the schema does not define",
     "Usually a typo: the hint names the closest field. Sections forbid unknown keys so "
     "that a misspelt option is never silently ignored."),
    ("FS021", "missing-field", "a required field is missing",
     "The position is the section that should hold the field."),
    ("FS022", "wrong-type", "a value has the wrong type",
     "Types are strict: `\"2048\"` is not a number and `yes` is not a boolean."),
    ("FS023", "not-in-enum", "a value is not one of the allowed choices",
     "The hint names the closest allowed value."),
    ("FS024", "constraint", "a value breaks a constraint of its field",
     "Out of range, too long, or not matching the field's pattern."),
    ("FS025", "invariant", "fields that are valid alone contradict each other",
     "Exactly one model source; multi-node run by hand (`fsdpspec run`) needs "
     "`launch.rdzv_endpoint` (the Slurm and Kubernetes exports derive it); text and jsonl "
     "sources need `data.path`; `geometry` only describes a factory model."),
    ("FS031", "hub-not-cached", "a Hub id names files the local cache does not hold",
     "`model.weights` or `data.tokenizer` names a Hub repository (`org/name[@revision]`) "
     "that is not in the Hugging Face cache: an error offline (`HF_HUB_OFFLINE=1`), a "
     "warning online, where `fsdpspec run` fetches it first. The message gives the "
     "`huggingface-cli download` command."),
    ("FS040", "json-file", "a JSON file fsdpspec reads is not bounded JSON",
     "A tokenizer file, a safetensors header, a Hugging Face cache ref, or a run "
     "directory's resolved-spec.json, manifest, metrics.jsonl or events.jsonl that is not a "
     "regular file (a FIFO, a device), larger than its limit, nested too deep, holds an "
     "integer of more than 100 digits, a float that overflows, NaN, an over-long string, "
     "or is not UTF-8 JSON. The message names the file (and the line of a JSONL record). "
     "Only regular files are read, non-blocking, and a read is given up after 10 s."),
    ("FS041", "record-shape", "a run record has the wrong shape",
     "A metrics.jsonl or events.jsonl record that is valid JSON but not what fsdpspec "
     "writes: a step that is not an integer from 0 to 10^12, a value that is neither a "
     "number, a string, true/false nor null, a finite number beyond 10^30, an unknown "
     "event. The message names the file and the line."),
    ("FS042", "checkpoint-unverified", "a checkpoint to export does not match its manifest",
     "`fsdpspec export hf` verifies the checkpoint (every file's size and sha256, as its "
     "manifest.json records them) before it reads a tensor: a truncated, changed or "
     "deleted shard is named, and nothing is written. It follows what the checkpoint "
     "holds (the manifest's record and the tensors: a full model, or a LoRA's adapters "
     "of one rank on some targets), never an edited resolved-spec.json: a spec that "
     "describes something else is refused."),
    ("FS043", "introspection-bounded", "a model to introspect declares too many layers",
     "A model_type without an analytic family is planned from the model transformers "
     "builds on the meta device; that costs time per layer, so a config declaring more "
     "than 1024 layers (no causal LM has that many) is refused rather than built."),
    ("FS049", "output-refused", "an output cannot be written where -o says",
     "Every `-o` (init, export, import, plan's pictures, report) writes a new file "
     "atomically; an existing regular file is replaced only with --force, and never when "
     "it is one of the command's own inputs (the spec exported, the config imported, the "
     "run reported on: the same file through any link). A FIFO, a device, a directory or "
     "a symlink is never replaced, and a name the filesystem cannot hold (a component "
     "over 255 bytes), a missing directory or a read-only one is one line, before "
     "anything is written."),
    ("FS050", "import-feature-missing", "an imported config asks for what the spec cannot say",
     "`fsdpspec import` stops, writing nothing, when the source config uses a feature the "
     "v1 spec has no field for: tensor, context, sequence, pipeline or expert parallelism "
     "(accelerate's parallelism_config sizes, axolotl's tensor_parallel_size and "
     "context_parallel_size, torchtitan's degrees), float8 training, activation offloading, "
     "a quantized base model, an optimizer other than AdamW and SGD, or an objective or "
     "model the engine does not train (axolotl's `rl` KTO/ORPO/GRPO …, reward models, QAT, "
     "1-bit models; TRL's KTO, ORPO, GRPO, reward … trainers as a script's program; DPO "
     "imports), or a DPO setting its loss has no field for. One line per "
     "feature names it, its size and its line. Importing without it would train another "
     "job than the one configured."),
    ("FS051", "import-adapter", "an imported config's adapter is one the peft section cannot say",
     "axolotl's `adapter: lora|qlora` with its `lora_*` keys, and TRL's `--use_peft` with "
     "its `--lora_*` arguments, are imported as the `peft` section; an adapter beyond it "
     "(DoRA, fan_in_fan_out, adapters on some layers or "
     "on parameters, per-module ranks, LoRA+, another initialisation, a saved adapter to "
     "train on, a regular expression or every linear layer of a model whose targets "
     "fsdpspec cannot list, another adapter type) stops the import, one line per key, "
     "rather than importing a different adapter."),
    ("FS052", "import-malformed-value", "an imported config holds a value its tool never writes",
     "A list, a mapping, an out-of-range integer or non-ASCII digits where the source "
     "tool writes a scalar: the tool itself would fail on it, so the import stops with "
     "one line naming the key."),
    ("FS053", "import-file-unread", "a file an imported config names was not found",
     "A launch script's (or a TrainingArguments file's) `--fsdp_config FILE` is looked "
     "for where the script may be run from: beside it, in each parent directory up to "
     "its repository's root (the first holding .git, at most 32 levels), then in the "
     "working directory. When it is in none of them the rest is imported, and this note "
     "names the file whose FSDP keys were not: put the file there, or import from where "
     "the script runs.", Severity.INFO),
    ("FS054", "import-invalid-value", "an imported value is one the spec refuses",
     "`fsdpspec import` checks the spec it would write as `fsdpspec validate` checks a "
     "file (schema, models, the loader's bounds) before writing it: a count of 0, a "
     "negative batch, a LoRA alpha of 0 or a dropout of 1.5, an interval of inf or "
     "\"500\", an integer past 2^31, a rendezvous host with shell characters or a port "
     "outside 1-65535, more layer classes than a spec holds. One line per source value "
     "names its key, its line, the field and why; nothing is written."),
    ("FS055", "import-model-unresolved", "an imported config names a Mixture of Experts "
     "fsdpspec cannot stand in for",
     "A model the source names (`base_model`, `model_name_or_path`, torchtitan's `[model] "
     "name` and flavor, or only a decoder layer class) whose config is not on this machine "
     "(no preset of its geometry, no local config, not in the Hugging Face cache) is "
     "planned with a marked stand-in of its own family, said in the spec's comment and a "
     "note; a dense Llama stands in only for a dense model. A Mixture of Experts with no "
     "preset of its family (DeepSeek-V3, Llama 4, Mistral Small 4, Qwen3.5-MoE …, by the "
     "name's family in fsdpspec/catalog/model_names.py) is not swapped for a dense model: "
     "the import stops with one line naming the model and its family; pass `--hf-config "
     "DIR` (its config.json) or `--preset NAME`."),
    ("FS030", "model-config", "the model's config cannot be used",
     "`model.hf_config` is unreadable, or its config.json lacks or mistypes a field the "
     "planner needs."),
    ("FS032", "memory-not-checked", "the model's memory could not be planned here",
     "A warning: the model_type has no analytic family, so its geometry is read off the "
     "model transformers builds on the meta device; torch is not installed here and the "
     "geometry is not in the cache ($XDG_CACHE_HOME/fsdpspec/models, keyed by the "
     "config's sha256), so the memory rules (FS201-FS203) did not run. Install the train "
     "extra (`pip install 'fsdpspec[train]'`) and run `fsdpspec plan FILE` once, here or "
     "on a machine sharing the cache directory; later `validate` runs read the cache.",
     Severity.WARNING),
)


def explain_load_code(code: LoadCode) -> str:
    """Plain text for `fsdpspec explain FS0xx`."""
    return f"{code.code} {code.name} ({code.severity.value}): {code.summary}\n\n{code.doc}\n"
