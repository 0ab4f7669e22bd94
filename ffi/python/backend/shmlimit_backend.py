"""The PEP 517 build backend of ``pip wheel ./ffi/python``: maturin's, with the wheel's platform
tag the one ``[tool.maturin] compatibility`` names.

maturin's backend builds with ``--compatibility off`` (the plain ``linux`` tag, which PyPI
rejects and which says nothing of the glibc the module needs) unless the build arguments name a
compatibility; ``[tool.maturin]`` does not count. This backend passes ``--compatibility`` with
the value of ``[tool.maturin] compatibility`` (``pypi``: the lowest manylinux tag that the
module's versioned glibc symbols allow, checked by maturin's auditwheel, and an error if there is
none), unless the caller gives build arguments of its own (``--config-settings
maturin.build-args=...`` or ``MATURIN_PEP517_ARGS``), which are passed unchanged.

Every other hook is maturin's.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

import maturin
from maturin import (  # noqa: F401 - hooks this backend takes as they are
    build_editable,
    build_sdist,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_wheel,
)


def _settings(config_settings: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    settings = dict(config_settings or {})
    own = "maturin.build-args" in settings or "build-args" in settings
    if own or os.environ.get("MATURIN_PEP517_ARGS"):
        return settings
    compatibility = maturin.get_config().get("compatibility")
    if compatibility:
        settings["maturin.build-args"] = f"--compatibility {compatibility}"
    return settings


def build_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    name: str = maturin.build_wheel(wheel_directory, _settings(config_settings), metadata_directory)
    return name
