"""Job spec v1: the one place every field, type, default and description is declared.

``schema/fsdpspec-v1.json`` and ``docs/spec.md`` are generated from these models.
Enumerations are spelled as PyTorch spells them (``FULL_SHARD``, ``BACKWARD_PRE``…).
"""

# No `from __future__ import annotations` here: fsdpspec.spec.mirror reads the annotations
# as the objects they name.
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fsdpspec.catalog.accelerators import Accelerator, accelerator_names, resolve_accelerator
from fsdpspec.catalog.presets import preset_names
from fsdpspec.spec import compiled
from fsdpspec.spec.section import AfterValidator, Field, Section

API_VERSION = "fsdpspec/v1"

_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

Dtype = Literal["bfloat16", "float16", "float32"]
ShardingStrategy = Literal[
    "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"
]
PresetName = Literal[tuple(preset_names())]  # type: ignore[valid-type]
AcceleratorName = Literal[tuple(accelerator_names())]  # type: ignore[valid-type]
# What the models are generated from besides this module's source: the catalogue's names
# (fsdpspec.spec.compiled keys the shipped schemas by both).
SCHEMA_INPUTS = (PresetName, AcceleratorName)
# Counts are capped at int32: larger values are typos, and torch would overflow on them.
PositiveInt = Annotated[int, Field(ge=1, le=2**31 - 1)]
NonNegInt = Annotated[int, Field(ge=0, le=2**31 - 1)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# Memory sizes become byte counts (ints) in the planner; a legal float such as 1e300 must
# be refused here, at its line, rather than overflow there. A PiB per device and an EiB
# per node are beyond any machine.
MAX_DEVICE_GIB = 2.0**20
MAX_HOST_GIB = 2.0**30
MAX_TFLOPS = 1e9


class _Section(Section):
    # strict: YAML already typed every value; "yes" or "2048" must not be coerced. The
    # attribute docstrings are each field's description, read only when the schema is
    # generated (fsdpspec.spec.schema): pydantic's use_attribute_docstrings would read
    # this file's source at every import, a fifth of `validate`'s time.
    model_config = {"extra": "forbid", "strict": True}

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        compiled.install(cls)


class Metadata(_Section):
    name: str = Field(min_length=1, max_length=63, pattern=_NAME_PATTERN)
    """Job name: letters, digits, '.', '_' and '-' (≤ 63). Names the run directory, the
    Slurm job and the Kubernetes PyTorchJob."""
    description: str = ""
    """Free text describing the job."""
    labels: dict[str, str] = {}
    """Key/value labels copied to the Kubernetes manifest."""


class Performance(_Section):
    """Bandwidths and matmul efficiencies that differ from the accelerator's catalogue
    entry (clusters differ); each unset field keeps the catalogue's. Read by the
    step-time model of `fsdpspec plan` and `fsdpspec tune` (docs/tune.md)."""

    hbm_gbps: FiniteFloat | None = Field(default=None, gt=0)
    """Device memory bandwidth, GB/s (on CPU: the host's memory bandwidth per process)."""
    intra_node_gbps: FiniteFloat | None = Field(default=None, gt=0)
    """Collective bandwidth per device inside a node, GB/s per direction (NVLink,
    Infinity Fabric, PCIe; on CPU: gloo's)."""
    inter_node_gbps: FiniteFloat | None = Field(default=None, gt=0)
    """Collective bandwidth per device between nodes, GB/s per direction (the NIC)."""
    host_gbps: FiniteFloat | None = Field(default=None, gt=0)
    """Host↔device copy bandwidth per device, GB/s (CPU offload)."""
    bf16_efficiency: FiniteFloat | None = Field(default=None, gt=0, le=1)
    """Share of the bf16 peak a training step's matrix multiplies reach."""
    fp16_efficiency: FiniteFloat | None = Field(default=None, gt=0, le=1)
    """Share of the fp16 peak a training step's matrix multiplies reach."""
    fp32_efficiency: FiniteFloat | None = Field(default=None, gt=0, le=1)
    """Share of the fp32 peak a training step's matrix multiplies reach."""
    collective_latency_us: FiniteFloat | None = Field(default=None, ge=0)
    """Fixed cost of one collective call, microseconds, whatever its size (each unit's
    all-gather, reduce-scatter and all-reduce pays it); measured by `tune --measure`."""
    layer_overhead_us: FiniteFloat | None = Field(default=None, ge=0)
    """Fixed framework time per decoder layer per micro-batch, forward and backward,
    microseconds (Python, op dispatch, autograd: what a step costs at no FLOPs); measured
    by `tune --measure`."""
    optimizer_gbps: FiniteFloat | None = Field(default=None, gt=0)
    """Rate of the optimizer step as memory traffic over the rank's fp32 shard, GB/s
    (default: hbm_gbps); measured by `tune --measure`."""


class CustomAccelerator(Performance):
    name: str = Field(min_length=1)
    """A name for the device, shown in reports."""
    memory_gib: FiniteFloat = Field(gt=0, le=MAX_DEVICE_GIB)
    """Usable device memory in GiB."""
    bf16_tflops: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TFLOPS)
    """Dense bf16 peak in TFLOP/s (0 when bf16 is not supported)."""
    fp16_tflops: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TFLOPS)
    """Dense fp16 peak in TFLOP/s."""
    fp32_tflops: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TFLOPS)
    """Dense fp32 peak in TFLOP/s."""
    fp8_tflops: FiniteFloat = Field(default=0.0, ge=0, le=MAX_TFLOPS)
    """Dense FP8 tensor-core peak in TFLOP/s (0: no FP8 tensor cores; float8 is refused)."""
    supports_bf16: bool = True
    """Whether the device computes in bfloat16."""
    device: Literal["gpu", "cpu"] = "gpu"
    """gpu, or cpu: processes on host memory (sized by host_memory_gib), as the
    calibration of `fsdpspec tune --measure` on a CPU machine writes."""


class Resources(_Section):
    nodes: PositiveInt = 1
    """Number of machines."""
    gpus_per_node: PositiveInt = 1
    """Processes per node: one per GPU (on CPU, the number of processes)."""
    accelerator: AcceleratorName | CustomAccelerator = "cpu"  # type: ignore[valid-type]
    """A catalogue name (listed by `fsdpspec plan --help`), "cpu", or a custom device
    {name, memory_gib, bf16_tflops, …}."""
    host_memory_gib: FiniteFloat = Field(default=64.0, gt=0, le=MAX_HOST_GIB)
    """Host RAM per node in GiB; checked for CPU offload, weight loading and rank-0
    full-state-dict gathers. Requested from Slurm (--mem) and Kubernetes (memory)."""
    cpus_per_node: PositiveInt | None = None
    """CPU cores per node requested from Slurm (--cpus-per-task) and Kubernetes (cpu);
    null = 4 per GPU, or one per process on CPU."""
    memory_headroom: FiniteFloat = Field(default=0.10, ge=0, lt=1)
    """Fraction of device memory kept free when judging whether the job fits."""
    performance: Performance | None = None
    """Bandwidths and matmul efficiencies that replace the accelerator's catalogue values
    in the step-time model (docs/tune.md)."""


class Geometry(_Section):
    """Model shape for planning a `factory` model (Hugging Face config names)."""

    hidden_size: PositiveInt
    """Width of the residual stream."""
    intermediate_size: PositiveInt
    """Width of the MLP."""
    num_hidden_layers: PositiveInt
    """Number of transformer layers."""
    num_attention_heads: PositiveInt
    """Query heads."""
    num_key_value_heads: PositiveInt | None = None
    """Key/value heads (grouped-query attention); defaults to num_attention_heads."""
    head_dim: PositiveInt | None = None
    """Per-head width; defaults to hidden_size / num_attention_heads."""
    vocab_size: PositiveInt
    """Vocabulary size."""
    max_position_embeddings: PositiveInt = 4096
    """Longest sequence the model supports."""
    tie_word_embeddings: bool = False
    """Whether the output projection shares the input embedding."""
    attention_bias: bool = False
    """Whether q/k/v projections carry biases."""


class Model(_Section):
    preset: PresetName | None = None  # type: ignore[valid-type]
    """A built-in architecture (listed in docs/spec.md and by `fsdpspec init --help`);
    tiny-* presets are for tests."""
    hf_config: str | None = Field(default=None, min_length=1)
    """A Hugging Face config.json, a directory holding one, or a Hub id `org/name[@revision]`
    read from the local Hugging Face cache (a local path of that name wins). Any
    model_type: one without a built-in family is planned by building it on the meta
    device (needs fsdpspec[train])."""
    factory: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """"package.module:function" returning an nn.Module (plan needs `geometry`)."""
    geometry: Geometry | None = None
    """Shape of a factory model, for planning."""
    weights: str | None = Field(default=None, min_length=1)
    """Directory of safetensors (or .bin) weights, or a cached Hub id `org/name[@revision]`
    (`fsdpspec run` fetches it when online); null for random init."""
    attention: Literal["auto", "sdpa", "eager", "flash_attention_2"] = "auto"
    """Attention implementation; `auto` is what transformers picks for the model: sdpa,
    or eager for a model it builds without SDPA (Gemma 2, gpt-oss). `fsdpspec show`
    prints what it resolves to."""


class MixedPrecision(_Section):
    param_dtype: Dtype = "float32"
    """Dtype parameters are all-gathered and computed in."""
    reduce_dtype: Dtype = "float32"
    """Dtype gradients are reduced in."""
    buffer_dtype: Dtype = "float32"
    """Dtype of buffers (FSDP1 only; FSDP2 keeps buffers as they are)."""


_SHORTHANDS = {
    "fp32": MixedPrecision(),
    "bf16": MixedPrecision(param_dtype="bfloat16", buffer_dtype="bfloat16"),
    "fp16": MixedPrecision(param_dtype="float16", buffer_dtype="float16"),
}


def _expand_precision(value: MixedPrecision | str) -> MixedPrecision:
    return _SHORTHANDS[value].model_copy() if isinstance(value, str) else value


class Fsdp(_Section):
    version: Literal[1, 2] = 2
    """2 = FSDP2 `fully_shard` (default); 1 = `FullyShardedDataParallel`."""
    sharding_strategy: ShardingStrategy = "FULL_SHARD"
    """What is sharded: FULL_SHARD (params, grads, optimizer), SHARD_GRAD_OP (params stay
    gathered between forward and backward), NO_SHARD (replicated; DDP in full precision),
    HYBRID_SHARD / HYBRID_SHARD_ZERO2 (shard within a group, replicate across groups)."""
    shard_group_size: PositiveInt | None = None
    """Ranks per shard group for the hybrid strategies; defaults to gpus_per_node."""
    auto_wrap_policy: Literal["transformer", "size", "none"] = "transformer"
    """How units are chosen: one per transformer layer, by parameter count, or only the root."""
    transformer_layer_cls: list[str] = []
    """Layer classes wrapped as units by the transformer policy; inferred from the model
    when empty."""
    min_num_params: NonNegInt = 100_000_000
    """Size policy: a module with at least this many parameters becomes a unit."""
    mixed_precision: Annotated[
        MixedPrecision | Literal["bf16", "fp16", "fp32"], AfterValidator(_expand_precision)
    ] = Field(default="fp32", validate_default=True)
    """Dtypes, or a shorthand: bf16 (params bf16, reduce fp32), fp16, fp32."""
    cpu_offload: bool = False
    """Keep sharded parameters (and so gradients and the optimizer step) on the CPU."""
    backward_prefetch: Literal["BACKWARD_PRE", "BACKWARD_POST", "NONE"] = "BACKWARD_PRE"
    """When the next unit's all-gather is issued in backward (BACKWARD_POST: FSDP1 only)."""
    forward_prefetch: bool = False
    """FSDP1 only: issue the next all-gather before the current forward finishes."""
    limit_all_gathers: bool | None = None
    """FSDP1 only: rate-limit all-gathers (FSDP1 default: true)."""
    use_orig_params: bool | None = None
    """FSDP1 only: keep original parameters visible (FSDP1 default here: true)."""
    activation_checkpointing: Literal["none", "full", "selective", "op"] = "none"
    """Recompute layer activations in backward: every layer (full), every `ac_every`
    (selective), or, in every layer, all but the outputs of every other matrix multiply
    and of attention (op: torchtitan's op-level selective checkpointing)."""
    ac_every: PositiveInt = 2
    """With selective checkpointing, checkpoint one layer in this many."""
    activation_offload: bool = False
    """Move the tensors autograd saves for backward to pinned host memory in forward and
    back in backward (GPUs only), trading PCIe transfers for device memory."""
    sync_module_states: bool = True
    """FSDP1: broadcast rank 0's weights to all ranks at wrap time."""
    cpu_ram_efficient_loading: bool = True
    """Only rank 0 reads the weights; the others start on the meta device."""
    state_dict_type: Literal["SHARDED_STATE_DICT", "FULL_STATE_DICT"] = "SHARDED_STATE_DICT"
    """What each checkpoint writes. SHARDED_STATE_DICT: torch.distributed.checkpoint (DCP)
    files, every rank writing its own shards in parallel (`__R_0.distcp` + `.metadata`).
    FULL_STATE_DICT: the full model and optimizer state gathered to rank 0 (into host
    memory on GPUs) and written by rank 0 alone as one file, `full_state_dict.pt`
    (`torch.load` reads it). Either resumes exactly; the final export is safetensors
    either way."""


class Parallelism(_Section):
    tensor_parallel: PositiveInt = 1
    """Tensor-parallel degree: ranks each layer's weight matrices are split over
    (torchtitan's `tensor_parallel_degree`). The data-parallel strategy in `fsdp` runs
    over the remaining ranks, world size ÷ (tensor_parallel × context_parallel)."""
    context_parallel: PositiveInt = 1
    """Context-parallel degree (GPUs only): ranks each sequence is split over, with ring
    attention (torchtitan's `context_parallel_degree`). FSDP shards over the
    data-parallel × context-parallel ranks."""
    expert_parallel: PositiveInt = 1
    """Expert-parallel degree of a Mixture of Experts (torchtitan's layout): each layer's
    experts are split by expert index over this many ranks, which send each token to its
    experts' ranks and back by all-to-all. The experts are FSDP-sharded over the rest of
    the ranks that hold different tokens, FSDP's shard group × context_parallel ×
    tensor_parallel ÷ expert_parallel (torchtitan's `efsdp`), which expert_parallel must
    divide; every other parameter is sharded as without it."""


class EvalData(_Section):
    path: str | None = Field(default=None, min_length=1)
    """A separate evaluation set: local file or directory, or a Hub dataset id (as
    `data.path`); null = the training `path`."""
    split: str | None = Field(default=None, min_length=1)
    """Split of the evaluation set (e.g. `test`); null = `data.split` when `path` is set."""
    fraction: FiniteFloat = Field(default=0.0, ge=0, lt=1)
    """Hold out this fraction of the training records (seeded) instead of a separate set."""


class Data(_Section):
    source: Literal["corpus", "text", "jsonl", "dataset", "synthetic"] = "corpus"
    """corpus: the text shipped with fsdpspec; text / jsonl: local files at `path`;
    dataset: Hugging Face `datasets` (local jsonl/json/parquet/arrow files or a cached Hub
    dataset id at `path`); synthetic: random tokens."""
    path: str | None = Field(default=None, min_length=1)
    """Local file or directory for text / jsonl / dataset; or a Hub dataset id `org/name`
    (read from the local cache) for dataset."""
    split: str = Field(default="train", min_length=1)
    """dataset: the split to train on."""
    streaming: bool = False
    """dataset: read records lazily instead of tokenizing them all up front (data larger
    than host memory); every rank then tokenizes the stream itself."""
    format: Literal["text", "chat", "prompt_completion", "preference"] = "text"
    """dataset: text = documents packed end to end; chat = `messages` rendered with the
    tokenizer's chat template, loss on assistant tokens only; prompt_completion = loss on
    the completion only; preference = a prompt with a chosen and a rejected completion
    (text, or chat messages), for `train.objective: dpo` (docs/dpo.md)."""
    text_field: str = "text"
    """Field of each jsonl / dataset record that holds the text."""
    messages_field: str = "messages"
    """chat: field holding the list of {role, content} messages."""
    prompt_field: str = "prompt"
    """prompt_completion: field holding the prompt."""
    completion_field: str = "completion"
    """prompt_completion: field holding the completion."""
    chosen_field: str = "chosen"
    """preference: field holding the preferred completion."""
    rejected_field: str = "rejected"
    """preference: field holding the dispreferred completion."""
    packing: bool = True
    """chat / prompt_completion: pack several examples per sequence (positions restart at
    each example); false = one example per sequence, padded."""
    eval: EvalData = EvalData()
    """dataset: the evaluation set (a separate path/split, or a held-out fraction)."""
    tokenizer: str | None = Field(default=None, min_length=1)
    """Tokenizer directory, or a cached Hub id `org/name[@revision]`; null = byte-level
    (256 byte ids, then EOS)."""
    # 2 at least: a sequence of one token has no next token to predict.
    seq_len: int = Field(default=2048, ge=2, le=2**31 - 1)
    """Tokens per sequence (documents are packed)."""
    micro_batch_size: PositiveInt = 1
    """Sequences per process per forward/backward."""
    global_batch_size: PositiveInt = 32
    """Sequences per optimizer step over all ranks; accumulation steps are derived."""

    def evaluates(self) -> bool:
        """Whether an evaluation set is configured."""
        return bool(self.eval.path or self.eval.split or self.eval.fraction)


class Scheduler(_Section):
    name: Literal["constant", "linear", "cosine"] = "cosine"
    """Learning-rate schedule after warmup."""
    warmup_steps: NonNegInt = 0
    """Linear warmup from 0 over this many steps."""
    min_lr_ratio: FiniteFloat = Field(default=0.1, ge=0, le=1)
    """Final learning rate as a fraction of `lr` (linear and cosine)."""


class Optimizer(_Section):
    name: Literal["adamw", "sgd"] = "adamw"
    """AdamW (two fp32 states per parameter) or SGD with momentum."""
    lr: FiniteFloat = Field(default=2.0e-5, gt=0)
    """Peak learning rate."""
    weight_decay: FiniteFloat = Field(default=0.0, ge=0)
    """Decoupled weight decay."""
    betas: list[FiniteFloat] = Field(default=[0.9, 0.95], min_length=2, max_length=2)
    """AdamW betas."""
    eps: FiniteFloat = Field(default=1.0e-8, gt=0)
    """AdamW epsilon."""
    momentum: FiniteFloat = Field(default=0.9, ge=0, lt=1)
    """SGD momentum."""
    state_dtype: Literal["float32", "bfloat16", "int8"] = "float32"
    """AdamW moments: fp32 (torch.optim.AdamW), bf16 (4 bytes per parameter less), or
    8-bit block-quantised (torchao's AdamW8bit: 6 bytes less)."""
    grad_clip_norm: FiniteFloat | None = Field(default=1.0, gt=0)
    """Clip the total gradient norm (over all shards) to this; null = no clipping."""
    scheduler: Scheduler = Scheduler()
    """Learning-rate schedule."""


class Dpo(_Section):
    """Direct preference optimisation (TRL's `DPOTrainer`): the policy's log-probability
    ratio to a frozen reference on the chosen completion is pushed above the one on the
    rejected completion."""

    beta: FiniteFloat = Field(default=0.1, gt=0)
    """Strength of the pull towards the reference (TRL's `beta`); the rewards logged are
    beta × the log-probability ratios."""
    loss: Literal["sigmoid", "ipo"] = "sigmoid"
    """sigmoid: -log σ(beta × margin) (the DPO paper's, TRL's default); ipo: the squared
    distance of the per-token margin from 1 / (2 beta) (IPO, as TRL computes it)."""
    label_smoothing: FiniteFloat = Field(default=0.0, ge=0, lt=0.5)
    """sigmoid: the assumed share of preference pairs whose labels are flipped
    (conservative DPO): -(1-ε) log σ(beta × margin) - ε log σ(-beta × margin)."""
    reference: Literal["model", "adapter", "precomputed"] = "model"
    """The frozen reference: model = a copy of the starting weights, sharded as the
    policy is, with no gradients or optimizer state; adapter = with `peft`, the policy
    with its adapters disabled (no second copy); precomputed = one pass over the train
    and eval data before training writes the reference log-probs into the run directory
    (training holds no reference)."""


class Train(_Section):
    objective: Literal["sft", "dpo"] = "sft"
    """sft: next-token cross entropy on the labelled tokens; dpo: preference tuning on
    `data.format: preference` records, as `train.dpo` says (docs/dpo.md)."""
    dpo: Dpo = Dpo()
    """train.objective dpo: beta, the loss and the reference."""
    max_steps: PositiveInt = 1000
    """Optimizer steps to run."""
    seed: NonNegInt = 0
    """Seed for initialisation, data order and dropout."""
    compile: bool = False
    """torch.compile each layer (FSDP2)."""
    loss_chunks: PositiveInt = 1
    """Apply the output projection and cross entropy over this many chunks of the tokens,
    each recomputed in backward, so only one chunk's logits are ever alive (1 = all at once)."""
    loss_scaling: Literal["dynamic", "none"] = "dynamic"
    """fp16 only: dynamic loss scaling with a sharded gradient scaler, or none."""
    on_nonfinite: Literal["stop", "skip"] = "stop"
    """A non-finite loss or gradient norm stops the run, or skips that step."""
    eval_interval_steps: NonNegInt = 0
    """Evaluate on `data.eval` every this many steps (0 = only at the end)."""


class FinalExport(_Section):
    enabled: bool = True
    """Write full weights to run_dir/final at the end."""
    format: Literal["safetensors"] = "safetensors"
    """File format (loadable with from_pretrained)."""
    dtype: Dtype = "bfloat16"
    """Dtype of the exported weights."""
    max_shard_mb: PositiveInt = 5000
    """Weights larger than this (MB, 10^6 bytes) are split into model-0000x-of-0000y
    safetensors files with an index, as Hugging Face does above 5 GB."""


class Quantization(_Section):
    """How QLoRA stores the frozen base weights in 4 bits (the engine: torchao's NF4Tensor,
    sharded by FSDP2; the fields follow bitsandbytes' names)."""

    quant_type: Literal["nf4", "fp4"] = "nf4"
    """4-bit format of the frozen base weights: NormalFloat4 (nf4) or FP4 (planned only:
    the engine builds nf4, FS314)."""
    double_quant: bool = True
    """Quantise the per-block scales too (about 0.37 bits per weight saved; the engine's
    NF4 always does, FS314)."""
    compute_dtype: Dtype = "bfloat16"
    """Dtype the 4-bit weights are dequantised to for each matmul (the engine: the
    matmul input's, fsdp.mixed_precision.param_dtype, FS314)."""
    storage_dtype: Dtype = "bfloat16"
    """Dtype the packed 4-bit bytes are stored as (bitsandbytes' quant_storage): FSDP
    flattens and gathers a unit in one dtype, so it must be the unit's other parameters'
    dtype (fsdp.mixed_precision.param_dtype)."""


class Peft(_Section):
    """A parameter-efficient fine-tune: the base model frozen, low-rank adapters trained."""

    method: Literal["lora", "qlora"] = "lora"
    """lora: adapters on a base stored in the compute dtype; qlora: on a base quantised to
    4 bits (`quantization`)."""
    r: PositiveInt = 8
    """Rank of each adapter (A: r × in, B: out × r)."""
    alpha: FiniteFloat = Field(default=16.0, gt=0)
    """Scaling numerator: the adapter's output is multiplied by alpha / r."""
    dropout: FiniteFloat = Field(default=0.0, ge=0, lt=1)
    """Dropout on each adapter's input."""
    target_modules: list[Annotated[str, Field(min_length=1)]] | Annotated[
        str, Field(min_length=1)] = []
    """Modules that get adapters, matched as peft matches them: a name or the end of a
    module's path (q_proj, self_attn.q_proj), or [all-linear] (every Linear but the
    output head); a string is a regular expression peft full-matches against each
    module's path; empty = the family's attention and MLP projections (none when
    target_parameters is set)."""
    target_parameters: list[Annotated[str, Field(min_length=1)]] = []
    """Parameters that get adapters (peft's target_parameters), matched as peft matches
    them: a parameter's path or its end (mlp.experts.gate_up_proj): a Mixture of Experts'
    stacked expert tensors, each expert with its own rank-r pair."""
    modules_to_save: list[Annotated[str, Field(min_length=1)]] = []
    """Modules trained in full beside the adapters and saved with them (e.g. lm_head):
    as peft does, every module whose path ends in the name (norm: every norm)."""
    quantization: Quantization = Quantization()
    """qlora: how the frozen base weights are quantised."""
    merged: bool = False
    """Also write the merged model (base + adapter, in checkpoint.final.dtype) to final/,
    beside final/adapter/."""


class Float8(_Section):
    """float8 training of the linear layers (torchao's `convert_to_float8_training`):
    each converted matmul casts its inputs to float8 with dynamic scales and runs at the
    accelerator's FP8 rate; weights, gradients and optimizer state stay in high precision."""

    recipe: Literal["tensorwise", "rowwise"] = "tensorwise"
    """Scaling granularity: one scale per tensor (tensorwise, torchao's default) or one per
    row (rowwise: more accurate, slower)."""
    exclude: list[Annotated[str, Field(min_length=1)]] = ["lm_head"]
    """Linear layers left in high precision, matched as peft matches names (the end of a
    module's path); torchtitan leaves the output projection."""
    fsdp_all_gather: bool | None = None
    """FSDP2 all-gathers the converted weights in float8 (half of bf16's traffic);
    tensorwise under FSDP2 only. null = on where it can run (tensorwise, FSDP2, sharded
    weights), false = gather in the compute dtype and cast after."""
    skip_small: bool = False
    """Leave in high precision the layers too small to gain (torchao's
    `auto_filter_small_kn` thresholds, measured on H100: the casts cost more than the
    float8 matmul saves)."""


class Checkpoint(_Section):
    dir: str = Field(default="runs/{name}", min_length=1)
    """Run directory; {name} is replaced by metadata.name. Relative to the working dir."""
    interval_steps: NonNegInt = 500
    """Save every this many steps (0 = only when stopped by a signal)."""
    keep_last: NonNegInt = 3
    """Checkpoints kept; older ones are deleted."""
    resume: str = Field(default="auto", min_length=1)
    """auto (newest complete checkpoint in the run dir), never, or a checkpoint path."""
    final: FinalExport = FinalExport()
    """Full-weights export at the end of training."""


class Wandb(_Section):
    project: str = Field(min_length=1)
    """W&B project."""
    name: str | None = None
    """Run name (default: metadata.name)."""
    mode: Literal["online", "offline", "disabled"] = "online"
    """offline writes run_dir/wandb only (no network; `wandb sync` uploads it later)."""


class Mlflow(_Section):
    tracking_uri: str | None = None
    """Tracking server or store, e.g. http://host:5000, sqlite:///mlflow.db or
    file:/path/mlruns (default: the file store run_dir/mlruns)."""
    experiment: str | None = None
    """Experiment name (default: metadata.name)."""


class Logging(_Section):
    interval_steps: PositiveInt = 10
    """Log every this many steps."""
    jsonl: bool = True
    """Write run_dir/metrics.jsonl."""
    tensorboard: bool = False
    """Write TensorBoard events to run_dir/tensorboard."""
    wandb: Wandb | None = None
    """Log the metrics to Weights & Biases (needs the wandb package)."""
    mlflow: Mlflow | None = None
    """Log the metrics to MLflow (needs the mlflow-skinny or mlflow package)."""


# As Slurm writes them; anything else (a newline above all) would end an #SBATCH line.
_SLURM_NAME = r"^[A-Za-z0-9_.,+-]+$"
# What a shell `export`, Kubernetes and execve all accept as a variable name.
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
EnvName = Annotated[str, Field(pattern=_ENV_NAME)]


class Slurm(_Section):
    partition: str | None = Field(default=None, pattern=_SLURM_NAME)
    """Slurm partition."""
    account: str | None = Field(default=None, pattern=_SLURM_NAME)
    """Slurm account."""
    time: str = Field(default="04:00:00", pattern=r"^(\d+-)?\d{1,3}:\d{2}(:\d{2})?$")
    """Wall-clock limit as Slurm reads it: HH:MM:SS or D-HH:MM[:SS] (a bare MM:SS is
    minutes and seconds). The job is warned (SIGUSR1) ahead of it, checkpoints and
    requeues itself."""
    exclusive: bool = False
    """Whole nodes for the job (--exclusive)."""
    setup: list[Annotated[str, Field(pattern=r"^[^\n\r]*$")]] = []
    """Shell lines run before launching, verbatim (module load …, source venv/bin/activate).
    They are shell code: write them as you would in the script."""
    container: str | None = Field(default=None, pattern=r"^[^\s]+$")
    """Container image for the job's tasks (pyxis: srun --container-image); the run root
    is mounted at the same path."""


class Kubernetes(_Section):
    namespace: str = "default"
    """Namespace of the PyTorchJob."""
    image: str | None = None
    """Container image with fsdpspec[train] installed (required to export)."""
    volume: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """An existing PersistentVolumeClaim mounted at the run root (/workspace): the run
    directory outlives the pods and every node shares it."""


# A TCP port, 1 to 65535 (0 asks the kernel for any port, which the other nodes cannot
# know), as a pattern: the JSON Schema editors read says it too.
_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"


class Launch(_Section):
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Process-group backend: auto = nccl on GPU, gloo on CPU."""
    rdzv_endpoint: Annotated[str, Field(
        pattern=rf"^[A-Za-z0-9_.\-\[\]:]+:{_PORT}$",
        json_schema_extra={"x-pattern-means": "host:port, the port from 1 to 65535"},
    )] | None = None
    """host:port (a port from 1 to 65535) of the c10d rendezvous; required when nodes > 1
    and `fsdpspec run` is started by hand (the Slurm and Kubernetes exports derive it)."""
    max_restarts: NonNegInt = 0
    """Times torchrun restarts the group after a failure (the engine resumes)."""
    timeout_minutes: PositiveInt = 30
    """Collective timeout."""
    env: dict[EnvName, str] = Field(
        default={}, json_schema_extra={"propertyNames": {"pattern": _ENV_NAME},
                                       "additionalProperties": {"type": "string"}})
    """Environment variables for every process (names: letters, digits, '_')."""
    slurm: Slurm = Slurm()
    """sbatch settings for `fsdpspec export slurm`."""
    kubernetes: Kubernetes = Kubernetes()
    """PyTorchJob settings for `fsdpspec export kubernetes`."""


class Lint(_Section):
    ignore: list[str] = []
    """Rule codes or code prefixes this file accepts (e.g. FS503, FS2)."""


@dataclass(frozen=True)
class InputField:
    """One spec field that names an input the job reads: the one table validate, the
    path checks, pre-flight, `fsdpspec run`'s Hub fetch and the resolved spec read."""

    path: tuple[str, ...]
    want_dir: bool
    """The input must be a directory."""
    hub: str | None
    """The Hub repo type an id here may name instead of a local path (a data path: only
    under the dataset source)."""
    fetch: tuple[str, ...] = ()
    """The files `fsdpspec run` fetches for a Hub id (none: `datasets` loads a dataset
    id itself)."""

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def pointer(self) -> str:
        return "/" + "/".join(self.path)

    def value(self, spec: "JobSpec") -> str | None:
        return field_value(spec, self.path)


def field_value(spec: "JobSpec", path: tuple[str, ...]) -> Any:
    """The value of the field at ``path`` (section, …, key) of the spec."""
    holder: Any = spec
    for part in path:
        holder = getattr(holder, part)
    return holder


INPUT_FIELDS = (
    InputField(("model", "hf_config"), False, "model", ("*.json",)),
    InputField(("model", "weights"), True, "model", ("*.json", "*.safetensors")),
    InputField(("data", "path"), False, "dataset"),
    InputField(("data", "eval", "path"), False, "dataset"),
    InputField(("data", "tokenizer"), True, "model", ("*.json", "*.model", "*.txt", "*.tiktoken")),
)
# The inputs a model repository on the Hub may supply (fetched by `fsdpspec run`).
MODEL_HUB_INPUTS = tuple(f for f in INPUT_FIELDS if f.fetch)


class JobSpec(_Section):
    """A fsdpspec training job."""

    apiVersion: Literal["fsdpspec/v1"]
    """Spec version."""
    kind: Literal["TrainingJob"]
    """Document kind."""
    metadata: Metadata
    """Name and labels."""
    resources: Resources = Resources()
    """Nodes, processes and devices."""
    model: Model
    """Which model: exactly one of preset, hf_config, factory."""
    fsdp: Fsdp = Fsdp()
    """Sharding, wrapping, precision, offload and checkpointing of activations."""
    parallelism: Parallelism = Parallelism()
    """Tensor and context parallelism beside FSDP's data parallelism."""
    data: Data = Data()
    """Training data and batch sizes."""
    optimizer: Optimizer = Optimizer()
    """Optimizer and learning-rate schedule."""
    train: Train = Train()
    """Steps, seed, compile and fault policy."""
    peft: Peft | None = None
    """A LoRA or QLoRA fine-tune of the model (null = every parameter is trained)."""
    float8: Float8 | None = None
    """float8 training of the linear layers (null = the compute dtype of `fsdp`)."""
    checkpoint: Checkpoint = Checkpoint()
    """Run directory, checkpoints, resume and final export."""
    logging: Logging = Logging()
    """Metrics output."""
    launch: Launch = Launch()
    """How processes are started."""
    lint: Lint = Lint()
    """Lint exceptions for this file."""

    @property
    def world_size(self) -> int:
        return self.resources.nodes * self.resources.gpus_per_node

    def device(self) -> Accelerator:
        """resources.accelerator as a catalogue entry (a custom device is a GPU unless it
        says `device: cpu`), with resources.performance applied."""
        return resolve_accelerator(self.resources.accelerator, self.resources.performance)

    def input_paths(self) -> list[tuple[str, str, bool, str | None]]:
        """(pointer, path as written, must be a directory, the Hub repo type it may name
        instead) for each input this job reads (``INPUT_FIELDS``): model.hf_config (a
        config.json or its directory), model.weights, data.path and data.eval.path (text
        / jsonl / dataset) and data.tokenizer (unless the data is synthetic)."""
        source = self.data.source
        inputs: list[tuple[str, str, bool, str | None]] = []
        for field in INPUT_FIELDS:
            value = field.value(self)
            if not value:
                continue
            hub = field.hub
            if field.path[0] == "data" and field.path[-1] == "path":
                if source not in ("text", "jsonl", "dataset"):
                    continue
                hub = hub if source == "dataset" else None
            elif field.path == ("data", "tokenizer") and source == "synthetic":
                continue
            inputs.append((field.pointer, value, field.want_dir, hub))
        return inputs

    def run_dir(self) -> str:
        """The run directory with {name} filled in."""
        return self.checkpoint.dir.replace("{name}", self.metadata.name)

    def as_json_data(self) -> dict[str, Any]:
        """Plain JSON data with every default filled in (the resolved spec)."""
        return self.model_dump(mode="json")

    def as_written(self) -> dict[str, Any]:
        """Plain JSON data of the fields the document set, defaults left out: a spec
        that validates as the original did (lint rules see only what was written)."""
        return self.model_dump(mode="json", exclude_unset=True)
