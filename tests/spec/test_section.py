"""The spec's sections (plain classes validated by pydantic-core, fsdpspec.spec.section)
behave as the pydantic models they mirror (fsdpspec.spec.mirror): on every case file they
accept and refuse the same documents with the same errors, and dump the same data."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
from fuzz_specs import mutated_data
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel
from pydantic_core import ValidationError

from conftest import CASES
from fsdpspec.spec.load import load_file
from fsdpspec.spec.mirror import pydantic_model
from fsdpspec.spec.v1 import Fsdp, JobSpec, MixedPrecision, Resources

_CASES = sorted((CASES / "valid").glob("*.yaml")) + sorted((CASES / "invalid").glob("*.yaml"))


def _outcome(model, data):
    try:
        spec = model.model_validate(data)
    except ValidationError as refused:
        return "refused", [(e["type"], e["loc"], e["msg"]) for e in refused.errors()]
    return "accepted", (spec.model_dump(mode="json"),
                        spec.model_dump(mode="json", exclude_unset=True))


# The mirror's after-validator returns a shorthand's section (a plain MixedPrecision),
# which pydantic serializes by inference, with a warning: the same data.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
@pytest.mark.parametrize("case", _CASES, ids=lambda p: p.name)
def test_a_section_says_what_its_pydantic_model_says(case: Path) -> None:
    data = load_file(case).data
    if not isinstance(data, dict):
        pytest.skip("not a mapping: refused before the models")
    assert _outcome(JobSpec, data) == _outcome(pydantic_model(JobSpec), data)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutated_data())
def test_a_mutated_spec_gets_the_same_answer_from_both(data) -> None:
    """Specs nobody wrote (deleted, retyped, renamed, swapped keys): 4,000 at another
    seed agreed too."""
    assert _outcome(JobSpec, data) == _outcome(pydantic_model(JobSpec), data)


def test_the_cases_hold_both_outcomes() -> None:
    outcomes = {_outcome(JobSpec, d)[0] for d in (load_file(c).data for c in _CASES)
                if isinstance(d, dict)}
    assert outcomes == {"accepted", "refused"}


def test_sections_are_plain_classes_and_their_mirrors_pydantic_models() -> None:
    assert not issubclass(JobSpec, BaseModel)
    assert issubclass(pydantic_model(JobSpec), BaseModel)
    assert JobSpec.from_compiled


def test_nested_sections_and_defaults_are_sections_of_their_own() -> None:
    spec = JobSpec.model_validate({"apiVersion": "fsdpspec/v1", "kind": "TrainingJob",
                                   "metadata": {"name": "x"}, "model": {"preset": "tiny-llama"},
                                   "fsdp": {"mixed_precision": "bf16"}})
    assert type(spec.fsdp) is Fsdp and type(spec.fsdp.mixed_precision) is MixedPrecision
    assert spec.fsdp.mixed_precision.param_dtype == "bfloat16"
    assert type(spec.resources) is Resources
    assert spec.model_fields_set == {"apiVersion", "kind", "metadata", "model", "fsdp"}
    # A default is each spec's own: changing one spec's leaves the next spec's alone.
    spec.resources.gpus_per_node = 8
    assert Resources().gpus_per_node == 1 and "gpus_per_node" in spec.resources.model_fields_set


def test_copies_equality_and_pickles() -> None:
    fsdp = Fsdp(sharding_strategy="SHARD_GRAD_OP")
    changed = fsdp.model_copy(update={"cpu_offload": True})
    assert changed.cpu_offload and not fsdp.cpu_offload
    assert changed.model_fields_set == {"sharding_strategy", "cpu_offload"}
    assert changed.mixed_precision is fsdp.mixed_precision  # shallow, as pydantic's
    deep = copy.deepcopy(fsdp)
    assert deep == fsdp and deep.mixed_precision is not fsdp.mixed_precision
    assert deep.model_fields_set == fsdp.model_fields_set
    assert pickle.loads(pickle.dumps(fsdp)) == fsdp
    assert fsdp != changed and fsdp != fsdp.model_dump()
    assert repr(fsdp).startswith("Fsdp(version=2, sharding_strategy='SHARD_GRAD_OP', ")
    with pytest.raises(TypeError):
        hash(fsdp)


def test_an_unknown_field_is_refused_on_a_section_as_on_a_model() -> None:
    with pytest.raises(AttributeError, match="Fsdp has no field 'shardng'"):
        Fsdp().shardng = "x"
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Fsdp(shardng="x")
    with pytest.raises(ValidationError, match="Input should be 1 or 2"):
        Fsdp(version=3)
