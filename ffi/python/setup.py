"""Builds the shmlimit wheel: cargo builds libshmlimit.so from the crate, setuptools compiles
the C extension shmlimit._native against ffi/include/shmlimit.h and that library, and both go
into the package directory (the extension finds the library next to itself: rpath $ORIGIN).

Why setuptools rather than maturin: the hot path is a CPython extension written in C over the
C header, which setuptools compiles natively; maturin builds Rust crates (pyo3, cffi in ABI
mode, uniffi, bin) and has no way to compile a C extension against the cdylib it built. The
cargo step is one subprocess call.

The crate is found at ``$SHMLIMIT_CRATE_DIR``, else ``crate/`` (in an sdist, where the sdist
command copied it), else two directories up (the repository checkout: ffi/python).
``CARGO_TARGET_DIR`` is honoured (a checkout's own ``target/`` otherwise, so a built tree is
reused); ``CARGO`` names the cargo binary.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
# What of the workspace an sdist must carry to build libshmlimit.so: the manifests and lock file,
# the sources of every member (cargo loads the whole workspace: the library, the C ABI and the C
# library, the CLI, the fleet agent), the targets the manifests name (tests, benches, examples:
# cargo checks that they exist), and the C header.
CRATE_FILES = [
    "Cargo.toml", "Cargo.lock", "README.md", "src", "benches", "tests", "examples",
    "ffi/Cargo.toml", "ffi/src", "ffi/libshmlimit", "ffi/include",
    "cli/Cargo.toml", "cli/src", "fleet/Cargo.toml", "fleet/src",
]


def crate_root() -> Path:
    env = os.environ.get("SHMLIMIT_CRATE_DIR")
    candidates = [Path(env)] if env else [HERE / "crate", HERE.parent.parent]
    for candidate in candidates:
        if (candidate / "Cargo.toml").is_file() and (
            candidate / "ffi" / "include" / "shmlimit.h"
        ).is_file():
            return candidate.resolve()
    raise SystemExit(
        "shmlimit: the Rust crate was not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); build from the repository's ffi/python or from an sdist, or set SHMLIMIT_CRATE_DIR"
    )


def crate_version(root: Path) -> str:
    """The [workspace.package] version of Cargo.toml, which every package of the workspace
    inherits: the wheel's version is the crate's."""
    text = (root / "Cargo.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[workspace\.package\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    match = section and re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
    if not match:
        raise SystemExit(f"shmlimit: no [workspace.package] version in {root / 'Cargo.toml'}")
    return match.group(1)


class BuildExt(build_ext):
    """cargo build --release -p libshmlimit (the C library's package), then the extension
    against the library it built."""

    def run(self) -> None:
        root = crate_root()
        target = Path(os.environ.get("CARGO_TARGET_DIR") or root / "target")
        cargo = os.environ.get("CARGO", "cargo")
        if shutil.which(cargo) is None:
            raise SystemExit(
                "shmlimit: building the wheel needs the Rust toolchain (cargo not found on "
                "PATH); install it from https://rustup.rs or your distribution"
            )
        command = [cargo, "build", "--release", "-p", "libshmlimit", "--locked",
                   "--manifest-path", str(root / "Cargo.toml")]
        env = dict(os.environ, CARGO_TARGET_DIR=str(target))
        print("shmlimit: " + " ".join(command), file=sys.stderr)
        subprocess.run(command, check=True, env=env)
        release = target / "release"
        library = release / "libshmlimit.so"
        if not library.is_file():
            raise SystemExit(f"shmlimit: cargo did not produce {library}")
        include = root / "ffi" / "include"
        for ext in self.extensions:
            ext.include_dirs.append(str(include))
            ext.library_dirs.append(str(release))
        # The library and the header go into the package next to the extension.
        package_dirs = [Path(self.build_lib) / "shmlimit"]
        if self.inplace:
            package_dirs = [HERE / "src" / "shmlimit"]
        for package_dir in package_dirs:
            package_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(library, package_dir / "libshmlimit.so")
            shutil.copyfile(include / "shmlimit.h", package_dir / "shmlimit.h")
        super().run()


class Sdist(sdist):
    """An sdist that carries the crate (in crate/), so that it builds on its own."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / "crate"
        if dest.exists():  # an sdist made from an unpacked sdist already has it
            return
        root = crate_root()
        for name in CRATE_FILES:
            source = root / name
            if source.is_dir():
                shutil.copytree(source, dest / name,
                                ignore=shutil.ignore_patterns("target", "__pycache__"))
            elif source.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest / name)


setup(
    version=crate_version(crate_root()),
    ext_modules=[
        Extension(
            "shmlimit._native",
            sources=["src/shmlimit/_native.c"],
            libraries=["shmlimit"],
            # The extension loads libshmlimit.so from its own directory: DT_RPATH (not RUNPATH),
            # which LD_LIBRARY_PATH cannot override with another copy of the library.
            extra_link_args=["-Wl,-rpath,$ORIGIN", "-Wl,--disable-new-dtags"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
        )
    ],
    cmdclass={"build_ext": BuildExt, "sdist": Sdist},
)
