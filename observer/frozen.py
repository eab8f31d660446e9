"""A cheaper `__init__` for the frozen, slotted dataclasses built once or more per trace.

A frozen dataclass's generated `__init__` sets each field with `object.__setattr__` (its own
`__setattr__` refuses): per field a lookup of the method on `object`, a bound wrapper, an
argument tuple and a search of the class for the attribute. `quick_init` gives the class an
`__init__` of the same signature that calls each slot's descriptor directly (bound once,
when the class is made), about half the cost per field; everything else the dataclass
generated (frozen `__setattr__`, `__eq__`, `__hash__`, `__repr__`, `replace`, pickling) is
kept. A mapped trace builds a RagRecord of 21 fields, its Sources and their provenance.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """`cls` (a frozen dataclass with slots, its fields all positional-or-keyword, without
    default factories or `__post_init__`) with an `__init__` that sets its slots directly."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: quick_init needs a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init does not call __post_init__")
    names: dict[str, Any] = {}
    signature: list[str] = []
    body: list[str] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not field.init or field.kw_only or field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{field.name}: not a plain positional field")
        names[f"_set_{field.name}"] = cls.__dict__[field.name].__set__
        if field.default is dataclasses.MISSING:
            signature.append(field.name)
        else:
            names[f"_default_{field.name}"] = field.default
            signature.append(f"{field.name}=_default_{field.name}")
        body.append(f"    _set_{field.name}(self, {field.name})")
    source = f"def __init__(self, {', '.join(signature)}):\n" + "\n".join(body) + "\n"
    exec(source, names)  # the source is built above from the field names only
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 - mypy refuses assigning a method
    return cls
