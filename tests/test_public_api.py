"""The public surface is deliberate: ``__all__`` is exactly what the package exports."""

from __future__ import annotations

import inspect
import types

import agentsession


def test_all_names_exist_and_nothing_public_is_left_out() -> None:
    exported = set(agentsession.__all__)
    assert len(exported) == len(agentsession.__all__), "duplicates in __all__"
    for name in exported:
        assert hasattr(agentsession, name), name
    public = {
        name
        for name, value in vars(agentsession).items()
        if not name.startswith("_")
        and not (isinstance(value, types.ModuleType) and name not in exported)
        and name != "annotations"
    }
    assert public | {"__version__"} == exported


def test_every_exported_name_is_documented() -> None:
    for name in agentsession.__all__:
        value = getattr(agentsession, name)
        if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value):
            assert (value.__doc__ or "").strip(), name
