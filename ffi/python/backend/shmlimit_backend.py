"""The PEP 517 build backend of ``pip wheel ./ffi/python``: maturin's, with the wheel's platform
tag chosen here.

maturin's backend builds with ``--compatibility off`` (the plain ``linux`` tag, which PyPI
rejects and which says nothing of the glibc the module needs) unless the build arguments name a
compatibility; ``[tool.maturin]`` does not count. This backend passes one:

* **manylinux2014** (glibc 2.17 and later: every Linux a supported CPython runs on) where the
  build environment has Zig (the ``ziglang`` package, which ``get_requires_for_build_wheel``
  asks for on x86_64 and aarch64 Linux, so a ``pip wheel`` or ``pip install`` with build
  isolation has it): ``--zig`` links the module against glibc 2.17's symbol versions whatever
  the build machine's glibc. Built with the system linker on a newer glibc the Rust standard
  library's ``pthread_*`` and ``dlsym`` come at their 2.34 versions instead.
* otherwise ``[tool.maturin] compatibility`` (``pypi``: the lowest manylinux tag that the
  module's versioned glibc symbols allow on this machine, and an error if there is none).

maturin checks the wheel against that policy (its own auditwheel) and fails the build on a newer
symbol. A caller who gives build arguments of its own (``--config-settings
maturin.build-args=...`` or ``MATURIN_PEP517_ARGS``) gets them unchanged.

Every other hook is maturin's.
"""

from __future__ import annotations

import importlib.util
import os
import platform
from typing import Any, Dict, List, Mapping, Optional

import maturin
from maturin import (  # noqa: F401 - hooks this backend takes as they are
    build_editable,
    build_sdist,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_wheel,
)


# The Zig release the manylinux2014 build is tested with (maturin's --zig drives `python -m
# ziglang cc` as the linker).
ZIGLANG = "ziglang>=0.17,<0.18"
# The policy of a build linked by Zig: glibc 2.17.
ZIG_COMPATIBILITY = "manylinux2014"


def _zig_platform() -> bool:
    """Linux on a machine ziglang ships wheels for (the tag's policy is a Linux one)."""
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "aarch64")


def get_requires_for_build_wheel(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    requires: List[str] = list(maturin.get_requires_for_build_wheel(config_settings))
    if _zig_platform():
        requires.append(ZIGLANG)
    return requires


def _settings(config_settings: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    settings = dict(config_settings or {})
    own = "maturin.build-args" in settings or "build-args" in settings
    if own or os.environ.get("MATURIN_PEP517_ARGS"):
        return settings
    if _zig_platform() and importlib.util.find_spec("ziglang") is not None:
        settings["maturin.build-args"] = f"--zig --compatibility {ZIG_COMPATIBILITY}"
        return settings
    compatibility = maturin.get_config().get("compatibility")
    if compatibility:
        settings["maturin.build-args"] = f"--compatibility {compatibility}"
    return settings


def build_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    name: str = maturin.build_wheel(wheel_directory, _settings(config_settings), metadata_directory)
    return name
