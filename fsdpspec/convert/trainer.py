"""`fsdpspec import trainer FILE`: an HF Trainer job as a v1 spec, from a shell script's
one launch command (torchrun, accelerate launch, python) or a TrainingArguments JSON or
YAML file.

The Trainer turns its `fsdp` option ("full_shard auto_wrap offload" …) and its
`fsdp_config` (a JSON file, inline JSON or a mapping; keys with or without the `fsdp_`
prefix) into accelerate's FSDP keys, so this module does the same and hands them to
fsdpkeys; the training keys go to hftrain. What a script holds that cannot be read (a
shell variable, a process count of "gpu") is a note naming its line. TRL's DPO script is
a Trainer job too: trl_dpo reads its DPO, LoRA and dataset arguments.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fsdpspec.convert import accelerate_vocab as vocab
from fsdpspec.convert import hftrain, trl_dpo
from fsdpspec.convert.draft import Assumptions, Draft, Entry, ImportRefused, Note
from fsdpspec.convert.fsdpkeys import CONVERT, NotCarried, apply_fsdp, read_keys, take_layers, whole
from fsdpspec.convert.importer import Imported, finish
from fsdpspec.convert.sources import (
    LAUNCHER_VALUE_OPTIONS,
    Command,
    Document,
    SourceError,
    Token,
    read_command,
    read_inline_json,
    read_json,
    read_source,
)
from fsdpspec.semantics import DEFAULT_RDZV_PORT
from fsdpspec.spec.load import join

# The words of the Trainer's `fsdp` option, as accelerate keys.
_FSDP_WORDS = {
    "full_shard": ("fsdp_sharding_strategy", "FULL_SHARD"),
    "shard_grad_op": ("fsdp_sharding_strategy", "SHARD_GRAD_OP"),
    "no_shard": ("fsdp_sharding_strategy", "NO_SHARD"),
    "hybrid_shard": ("fsdp_sharding_strategy", "HYBRID_SHARD"),
    "hybrid_shard_zero2": ("fsdp_sharding_strategy", "HYBRID_SHARD_ZERO2"),
    "offload": ("fsdp_offload_params", True),
}
# Trainer arguments that are FSDP keys under another name (older transformers).
_FSDP_ARGS = {"fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params", "fsdp_version"}
# Script arguments common to Trainer scripts (alpaca, FastChat, trl) that say the length.
_SEQ_LEN = ("model_max_length", "max_seq_length", "max_length", "block_size", "seq_len")
_MODEL = ("model_name_or_path", "model_name", "model_id")


def _args(tokens: list[Token], file: str, draft: Draft) -> dict[str, Entry]:
    """`--key value`, `--key=value` and bare `--flag` (True) by key, dashes as
    underscores; a value holding a shell variable is a note, not a value."""
    args: dict[str, Entry] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.text.startswith("--"):
            draft.notes.append(Note(token.line, f"argument {token.text!r}: not an option; "
                                    "not imported"))
            continue
        key, eq, value = token.text[2:].partition("=")
        if not eq:
            values = []
            while index < len(tokens) and not tokens[index].text.startswith("--"):
                values.append(tokens[index].text)
                index += 1
            value = values if len(values) > 1 else values[0] if values else "True"
        name = key.replace("-", "_")
        if "$" in str(value):
            draft.notes.append(Note(token.line, f"--{key} {value}: a shell variable, which "
                                    "import cannot read; not imported"))
            continue
        args[name] = Entry(value, token.line, f"--{key}")
    return _negated(args)


def _negated(args: dict[str, Entry]) -> dict[str, Entry]:
    """HF's parser spells a boolean argument whose default is true `--no_KEY` (TRL's
    `--no_remove_unused_columns`, `--no_gradient_checkpointing`): KEY false, for the
    keys import reads."""
    known = hftrain.READ | hftrain.NO_BEARING | trl_dpo.KEYS
    read = {}
    for name, entry in args.items():
        if name.startswith("no_") and name[3:] in known:
            name, entry = name[3:], Entry("False", entry.line, entry.written)
        read[name] = entry
    return read


def _launcher_value(command: Command, *names: str) -> Entry | None:
    tokens = command.launcher_args
    for index, token in enumerate(tokens):
        key, eq, value = token.text.partition("=")
        if key in names:
            if not eq:
                value = tokens[index + 1].text if index + 1 < len(tokens) else ""
            return Entry(value, token.line, key)
    return None


def _count(entry: Entry | None, draft: Draft, what: str) -> int | None:
    if entry is None:
        return None
    number = whole(str(entry.value))
    if number is not None and number > 0:
        return number
    draft.note(entry, f"{entry.written} {entry.value}: not a number of {what} import can "
               "read; not imported")
    return None


# Launcher options that change nothing the spec holds (where logs go, which rank this
# node is, how the rendezvous is named); those read are in _topology.
_LAUNCHER_NO_BEARING = {
    "--standalone", "--rdzv_backend", "--rdzv-backend", "--rdzv_id", "--rdzv-id",
    "--node_rank", "--node-rank", "--machine_rank", "--local-ranks-filter",
    "--local_ranks_filter", "--log_dir", "--log-dir", "--redirects", "--tee",
    "--monitor_interval", "--multi_gpu", "--use_fsdp", "-m", "--module", "--gpu_ids",
    "--same_network", "--main_training_function",
}
_LAUNCHER_READ = {
    "--nproc_per_node", "--nproc-per-node", "--nnodes", "--master_addr", "--master-addr",
    "--master_port", "--master-port", "--rdzv_endpoint", "--rdzv-endpoint",
    "--num_processes", "--num_machines", "--main_process_ip", "--main_process_port",
    "--config_file", "-c", "--accelerate_config",
}


def _unread_launcher_options(command: Command, draft: Draft) -> None:
    for token in command.launcher_args:
        key = token.text.partition("=")[0]
        if key.startswith("-") and key not in _LAUNCHER_READ | _LAUNCHER_NO_BEARING:
            draft.notes.append(Note(token.line, f"{command.launcher} option {key}: not read "
                                    "by import; not imported"))


def _topology(command: Command, draft: Draft) -> None:
    _unread_launcher_options(command, draft)
    launcher = command.launcher
    if launcher in ("accelerate", "trl"):  # `trl dpo` launches through accelerate launch
        config = _launcher_value(command, "--config_file", "-c", "--accelerate_config")
        if config is not None:
            draft.note(config, (f"{config.written} {config.value}: the accelerate config is not "
                                "read here (import it with `fsdpspec import accelerate`)"))
        total = _count(_launcher_value(command, "--num_processes"), draft, "processes")
        nodes = _count(_launcher_value(command, "--num_machines"), draft, "machines") or 1
        host = _launcher_value(command, "--main_process_ip")
        port = _launcher_value(command, "--main_process_port")
        per_node = total // nodes if total and total % nodes == 0 else None
        if total and per_node is None:
            draft.notes.append(Note(command.launcher_args[0].line, (
                f"--num_processes {total} is not a multiple of --num_machines {nodes}: "
                "not imported")))
    elif launcher in ("torchrun", "python", "python3"):
        per_node_entry = _launcher_value(command, "--nproc_per_node", "--nproc-per-node")
        per_node = _count(per_node_entry, draft, "processes")
        nodes = _count(_launcher_value(command, "--nnodes"), draft, "nodes") or 1
        host = _launcher_value(command, "--master_addr", "--master-addr")
        port = _launcher_value(command, "--master_port", "--master-port")
        endpoint = _launcher_value(command, "--rdzv_endpoint", "--rdzv-endpoint")
        if endpoint is not None and "$" not in str(endpoint.value) and nodes > 1:
            draft.carry("launch.rdzv_endpoint", endpoint.value, endpoint)
        if launcher != "torchrun" and per_node_entry is None:
            per_node = 1  # plain python: one process
    else:
        raise SourceError(f"{command.file}: {launcher} launches are not read; use torchrun, "
                          "accelerate launch or python")
    if per_node:
        draft.put("resources.gpus_per_node", per_node, f"{launcher} (line "
                  f"{command.launcher_args[0].line if command.launcher_args else '?'})")
    draft.put("resources.nodes", nodes, f"{launcher}: {nodes} node(s)")
    if nodes > 1 and host is not None and "$" not in str(host.value) \
            and not draft.has("launch.rdzv_endpoint"):
        number = whole(str(port.value)) if port is not None else None
        port_value = number if number is not None else DEFAULT_RDZV_PORT
        draft.put("launch.rdzv_endpoint", f"{host.value}:{port_value}",
                  f"from {host.written} (line {host.line})", host)


# How many directories up from a script a relative --fsdp_config is looked for, when no
# repository root (.git) comes first.
_MAX_ANCESTORS = 32


def _run_dirs(source: Path) -> list[Path]:
    """Where a script may be run from: its directory, then each parent up to its
    repository's root (the first holding .git), at most _MAX_ANCESTORS of them."""
    dirs: list[Path] = []
    for directory in [source.parent, *source.resolve().parent.parents][:_MAX_ANCESTORS]:
        dirs.append(directory)
        if (directory / ".git").exists():
            break
    return dirs


def _config_file(value: Entry, source: Path, draft: Draft) -> Path | None:
    """The fsdp_config file a script names, looked for where the script may be run
    from and then in the working directory; None (and a note) when it is in neither.
    Anything at that name (a FIFO, a device, a symlink loop) is the file: reading it
    says why it cannot be read."""
    name = Path(str(value.value))
    places = [] if name.is_absolute() else _run_dirs(source)
    for path in [*(place / name for place in places), name]:
        if _named_entry(path):
            return path
    where = (f"beside {source.name}, in its parent directories up to {places[-1]} or in "
             "the working directory") if places else "at that path"
    draft.note(value, (f"FS053 {value.written} {value.value}: no such file {where}; its FSDP "
                       "keys are not imported (the rest of the job is)"))
    return None


def _named_entry(path: Path) -> bool:
    """Whether a directory entry other than a directory has this name (a dangling or
    looping link too); False for a name no file can have (a NUL, ENAMETOOLONG)."""
    try:
        return os.path.lexists(path) and not path.is_dir()
    except (OSError, ValueError):
        return False


def _fsdp_config(value: Entry, source: Path, draft: Draft) -> dict[str, Entry]:
    """The fsdp_config keys as accelerate keys: a JSON file (where the script may be run
    from, or the working directory), inline JSON, or a mapping."""
    if isinstance(value.value, dict):
        data, lines, file = value.value, {}, None
    elif str(value.value).lstrip().startswith("{"):
        data = read_inline_json(value.value, f"{source}:{value.line}: {value.written}")
        lines, file = {}, None
    else:
        path = _config_file(value, source, draft)
        if path is None:
            return {}
        try:
            document = read_json(path)
        except SourceError as exc:
            raise SourceError(f"{source}:{value.line}: {value.written}: {exc}") from None
        data, lines, file = document.data, document.lines, str(path)
    if not isinstance(data, dict):
        raise SourceError(f"{source}:{value.line}: {value.written} is not a mapping of "
                          "FSDP keys")
    entries = {}
    for key, item in data.items():
        line = lines.get(join("", key)) if file else value.line
        entries[accelerate_key(key)] = Entry(item, line, key if file else f"{value.written} {key}",
                                        file)
    return entries


def accelerate_key(key: str) -> str:
    """A Trainer or axolotl fsdp_config key as accelerate spells it (`fsdp_` prefixed)."""
    return key if key.startswith("fsdp_") else f"fsdp_{key}"


def positioned_config(document: Document, key: str = "fsdp_config") -> dict[str, Entry]:
    """A mapping fsdp_config of a YAML or JSON file, each key with its own line."""
    section = document.data.get(key)
    if not isinstance(section, dict):
        return {}
    return {accelerate_key(name): Entry(value, document.line(join(f"/{key}", name)), name)
            for name, value in section.items()}


def fsdp_entries(args: dict[str, Entry], source: Path, draft: Draft,
                 config: dict[str, Entry] | None = None) -> dict[str, Entry]:
    """The Trainer's `fsdp` words and `fsdp_config` (HF argument names) as accelerate
    keys; ``config`` is an fsdp_config already read with its positions. axolotl, which
    hands both to the Trainer, reads its config through this too."""
    entries: dict[str, Entry] = {}
    option = args.get("fsdp")
    words = option.value if option is not None else ""
    words = words.split() if isinstance(words, str) else words or []
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
        raise SourceError(f"{source}:{option.line}: {option.written} is not a list of words "
                          "(full_shard, auto_wrap, offload …)")
    if not words and not config and "fsdp_config" not in args:
        draft.notes.append(Note(option.at if option else None, (
            "no fsdp option: the Trainer would not use FSDP; imported as an FSDP job")))
    for word in words:
        if word in _FSDP_WORDS:
            key, value = _FSDP_WORDS[word]
            entries[key] = Entry(value, option.line, f"{option.written} {word}")
        elif word != "auto_wrap":
            draft.note(option, f"{option.written} {word}: not an FSDP option of the Trainer; "
                       "not imported")
    if words:
        # The Trainer wraps by layer class with auto_wrap (by size when min_num_params is
        # set); without it, nothing is wrapped but the root, as accelerate's default.
        policy = "TRANSFORMER_BASED_WRAP" if "auto_wrap" in words else "NO_WRAP"
        entries["fsdp_auto_wrap_policy"] = Entry(policy, option.line, option.written)
    for key in _FSDP_ARGS:
        if key in args:
            entries[key] = args[key]
    if config:
        entries.update(config)
    elif "fsdp_config" in args:
        entries.update(_fsdp_config(args["fsdp_config"], source, draft))
    minimum = entries.get("fsdp_min_num_params")
    if "auto_wrap" in words and minimum is not None and str(minimum.value) not in ("0", ""):
        entries["fsdp_auto_wrap_policy"] = Entry("SIZE_BASED_WRAP", option.line, option.written)
    return entries


# Words of a training program's name that name TRL's preference, RL and reward trainers
# (trl/scripts/dpo.py, run_dpo.py, grpo_vlm.py, `-m trl.scripts.kto`, reward_modeling.py
# …): objectives the engine does not train (it trains next-token loss, and DPO: trl_dpo).
_TRL_OBJECTIVES = frozenset({"dpo", "ipo", "kto", "orpo", "simpo", "cpo", "grpo", "ppo",
                             "rloo", "gkd", "bco", "xpo", "prm", "reward"})


def _objective(program: Token) -> str | None:
    words = re.split(r"[._\-]", Path(program.text).name.removesuffix(".py").lower())
    return next((word for word in words if word in _TRL_OBJECTIVES), None)


# TRL's DPO script as a launch names it (`trl dpo` names it by its command).
_TRL_DPO = ("trl.scripts.dpo", "trl/scripts/dpo.py")


def _program_note(command: Command, draft: Draft) -> Entry | None:
    """The training program is not imported, except TRL's DPO script (or another program
    named for DPO, read as it and said so), whose entry is returned; TRL's other
    preference, RL and reward trainers (or such a `trl` command) are refused by name."""
    program, trl = command.program, command.launcher == "trl"
    if program is None:
        if trl:
            raise SourceError(f"{command.file}: trl with no command")
        return None
    what = f"trl {program.text}" if trl else f"the training program {program.text}"
    objective = _objective(program)
    if objective == "dpo":
        if not trl and not program.text.endswith(_TRL_DPO):
            draft.notes.append(Note(program.line, (
                f"{what}: read as TRL's DPO script (trl/scripts/dpo.py), its arguments as "
                "DPOConfig's and ModelConfig's")))
        return Entry("dpo", program.line, what)
    if objective is not None:
        draft.refuse(program.line, (
            f"{what} ({objective.upper()} training, a preference, RL or reward objective, "
            "TRL's trainer for it; the engine trains next-token loss and DPO)"))
    elif trl:
        raise SourceError(f"{command.file}: {what} launches are not read; use torchrun, "
                          "accelerate launch or python")
    else:
        draft.notes.append(Note(program.line, (
            f"{what} is not imported: fsdpspec trains with its own engine (the model, data "
            "and loss the spec names)")))
    return None


_HANDLED = frozenset({"fsdp", "fsdp_config", *_FSDP_ARGS, *_SEQ_LEN, *_MODEL})


def _rest(args: dict[str, Entry], draft: Draft, read: frozenset[str]) -> None:
    """The sequence length, and a note for each argument neither this module, hftrain
    nor ``read`` (another reader's keys) reads."""
    for key in _SEQ_LEN:
        if key in args:
            try:
                draft.carry("data.seq_len", hftrain.as_int(args[key].value), args[key])
            except NotCarried as exc:
                draft.note(args[key], f"{args[key].written}: {exc}; not imported")
            break
    for key, entry in args.items():
        if key in _HANDLED or key in hftrain.READ or key in hftrain.NO_BEARING or key in read:
            continue
        draft.note(entry, f"{entry.written}: no v1 field; not imported")


# Keys of the Trainer's fsdp_config that are no accelerate key (XLA's FSDP).
_XLA_KEYS = frozenset({"fsdp_xla", "fsdp_xla_fsdp_v2", "fsdp_xla_fsdp_grad_ckpt",
                       "fsdp_xla_fsdp_settings"})


def _is_bare_fsdp_config(data: dict) -> bool:
    """The file --fsdp_config names, rather than TrainingArguments: FSDP keys (with or
    without `fsdp_`) and not one training argument."""
    fsdp_keys = set(CONVERT) | set(vocab.NOT_CARRIED) | set(vocab.SILENT_NOOP_KEYS) | _XLA_KEYS
    training = hftrain.READ | hftrain.NO_BEARING | (_HANDLED - _FSDP_ARGS)
    return any(accelerate_key(key) in fsdp_keys for key in data) and not any(
        key.replace("-", "_") in training for key in data)


def _arguments(path: Path, draft: Draft
               ) -> tuple[dict[str, Entry], dict[str, Entry], Entry | None]:
    """The Trainer's arguments by name, an fsdp_config read with its positions, and the
    launch's DPO program (TRL's DPO script) where it runs one."""
    if path.suffix.lower() in (".json", ".yaml", ".yml"):
        document: Document = read_source(path)
        if _is_bare_fsdp_config(document.data):
            return (*_bare_fsdp_config(document, draft), None)
        args = {key.replace("-", "_"): Entry(value, document.line(join("", key)), key)
                for key, value in document.data.items()}
        return args, positioned_config(document), None
    command = read_command(path)
    if command.launcher == "python" and command.program is not None \
            and command.program.text in ("torch.distributed.run", "torch.distributed.launch"):
        command = _as_torchrun(command)
    program = _program_note(command, draft)
    if command.launcher == "trl" and program is None:  # refused by its objective above
        return {}, {}, None
    if command.launcher == "trl":
        command = _trl_launch(command)
    _topology(command, draft)
    return _args(command.args, command.file, draft), {}, program


def _trl_launch(command: Command) -> Command:
    """`trl dpo ARGS`: the arguments `accelerate launch` takes (TRL hands it those its
    script does not) as the launcher's, the rest as the script's."""
    launcher_args, args = [], []
    tokens, index = command.args, 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        key, eq, _ = token.text.partition("=")
        if key not in _LAUNCHER_READ | _LAUNCHER_NO_BEARING:
            args.append(token)
            continue
        launcher_args.append(token)
        if not eq and key in LAUNCHER_VALUE_OPTIONS | {"--accelerate_config"} \
                and index < len(tokens):
            launcher_args.append(tokens[index])
            index += 1
    return Command(command.file, "trl", launcher_args, command.program, args, command.env)


# What a command line that names an fsdp_config file most often says (FastChat,
# alpaca, the transformers docs): shard fully, wrap by the config's layer classes.
_ASSUMED_WORDS = "full_shard auto_wrap"


def _bare_fsdp_config(document: Document, draft: Draft
                      ) -> tuple[dict[str, Entry], dict[str, Entry]]:
    """An fsdp_config file alone: its keys, and the Trainer's --fsdp words assumed as
    the command line that names such a file most often writes them."""
    draft.notes.append(Note(None, (
        "read as an fsdp_config (the file TrainingArguments' --fsdp_config "
        "names): its FSDP keys are imported; the --fsdp words are on the command line, "
        f"assumed {_ASSUMED_WORDS!r}, and the training arguments are HF's defaults")))
    fsdp = Entry(_ASSUMED_WORDS, None, "--fsdp (assumed)")
    config = {accelerate_key(key): Entry(value, document.line(join("", key)), key)
              for key, value in document.data.items()}
    return {"fsdp": fsdp}, config


def _as_torchrun(command: Command) -> Command:
    """`python -m torch.distributed.run …` is torchrun."""
    from fsdpspec.convert.sources import _split

    tokens = [Token("torchrun", command.program.line), *command.args]
    return _split(tokens, command.file, LAUNCHER_VALUE_OPTIONS)


def import_config(path: Path, *, name: str, assumed: Assumptions,
                  base_dir: Path) -> Imported:
    """A commented v1 spec of the Trainer job at ``path``."""
    draft = Draft()
    args, config, program = _arguments(path, draft)
    reading = read_keys(fsdp_entries(args, path, draft, config))
    if reading.malformed:
        raise ImportRefused(reading.malformed)
    draft.notes += reading.notes
    apply_fsdp(reading, draft)
    if not draft.has("resources.gpus_per_node"):
        draft.put("resources.gpus_per_node", assumed.gpus_per_node,
                  "assumed (the source does not say): --gpus-per-node")
    world = draft.value("resources.gpus_per_node") * draft.value("resources.nodes", 1)
    hftrain.apply_training(draft, args, world)
    with_model = trl_dpo.apply_dpo(args, program, draft, base_dir) if program else None
    _rest(args, draft, trl_dpo.KEYS if program else frozenset())
    layers = take_layers(reading, draft)
    model = next((args[k] for k in _MODEL if k in args), None)
    return finish(draft, tool="HF Trainer", kind="trainer", source=str(path), name=name,
                  model=model, layers=layers, assumed=assumed, base_dir=base_dir,
                  with_model=with_model)
