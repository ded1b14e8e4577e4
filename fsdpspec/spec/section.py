"""The spec models' base: a section of the job spec is a plain class whose fields are its
annotations, validated and serialized by pydantic-core with the schema pydantic generates
for it (`fsdpspec.spec.compiled` ships them built).

pydantic itself is not imported to validate or plan: its import and model building were
half of `fsdpspec validate`'s time (pydantic-core alone is a third of that). pydantic
builds each section's model (`fsdpspec.spec.mirror`) only where a schema is generated:
`fsdpspec schema` and a stale compiled file. The methods keep pydantic's names and
meaning, so callers read a section as the pydantic model it mirrors.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin


class Field:
    """A field's default and constraints, spelled as `pydantic.Field` takes them."""

    __slots__ = ("kwargs",)

    def __init__(self, **kwargs: Any):
        self.kwargs = kwargs


class AfterValidator:
    """A function applied to a field's validated value (`pydantic.AfterValidator`)."""

    __slots__ = ("function",)

    def __init__(self, function: Callable[[Any], Any]):
        self.function = function


def is_section(value: Any) -> bool:
    """Whether ``value`` is a section class (a models module's private base is not)."""
    return (isinstance(value, type) and issubclass(value, Section)
            and not value.__name__.startswith("_"))


class Section:
    """One mapping of the spec. A subclass gets its ``__pydantic_validator__`` and
    ``__pydantic_serializer__`` as it is created (fsdpspec.spec.compiled.install); a
    models module's private base holds ``model_config`` (pydantic's ConfigDict keys)."""

    # pydantic-core sets these three on each instance it validates, as on a BaseModel.
    __slots__ = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__",
                 "__pydantic_private__")
    model_config: dict[str, Any] = {}
    from_compiled: bool  # validated with the shipped schema, not one pydantic just built
    __pydantic_validator__: Any
    __pydantic_serializer__: Any

    def __init__(self, **data: Any):
        type(self).__pydantic_validator__.validate_python(data, self_instance=self)

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        """Field → its type (what an ``Annotated`` adds left out), in declaration order,
        inherited fields first."""
        types: dict[str, Any] = {}
        for klass in reversed(cls.__mro__[:-2]):  # not Section, not object
            for name, annotation in vars(klass).get("__annotations__", {}).items():
                annotated = get_origin(annotation) is Annotated
                types[name] = get_args(annotation)[0] if annotated else annotation
        return types

    @classmethod
    def model_validate(cls, data: Any) -> Any:
        return cls.__pydantic_validator__.validate_python(data)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return type(self).__pydantic_serializer__.to_python(self, **kwargs)

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Any:
        """A shallow copy, with ``update``'s fields set as given (not validated)."""
        return self._copy({**self.__dict__, **(update or {})}, set(update or ()))

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # pydantic-core deep-copies a section default into each spec it validates: the
        # generic copy protocol (reduce, then setattr per slot) was a tenth of a spec's
        # validation.
        return self._copy(copy.deepcopy(self.__dict__, memo), set())

    def _copy(self, fields: dict[str, Any], also_set: set[str]) -> Any:
        new = object.__new__(type(self))
        object.__setattr__(new, "__dict__", fields)
        object.__setattr__(new, "__pydantic_fields_set__",
                           self.__pydantic_fields_set__ | also_set)
        object.__setattr__(new, "__pydantic_extra__", self.__pydantic_extra__)
        object.__setattr__(new, "__pydantic_private__", self.__pydantic_private__)
        return new

    @property
    def model_fields_set(self) -> set[str]:
        return self.__pydantic_fields_set__

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("__pydantic_"):  # how pickle and copy restore the slots
            object.__setattr__(self, name, value)
        elif name in self.__dict__:
            self.__dict__[name] = value
            self.__pydantic_fields_set__.add(name)
        else:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as a pydantic model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.__fields())})"

    def __str__(self) -> str:
        return " ".join(self.__fields())

    def __fields(self) -> list[str]:
        return [f"{k}={v!r}" for k, v in self.__dict__.items()]
