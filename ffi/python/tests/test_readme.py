"""The Python examples of the documentation run as written: every ```python block of
ffi/python/README.md, of ffi/README.md (the Python API page it points to), of the top-level
README.md and of docs/deploy.md, each in a fresh temporary directory by a fresh interpreter
with the package under test (the installed wheel in CI, the laid-out build under `cargo
test`). A block that raises fails its test, named by file and line.

One change is made to each block before it runs: its ``/dev/shm/`` paths point into the
temporary directory instead, so that runs share no file with each other or with the host."""

import os
import re
import subprocess
import sys
import tempfile
import unittest
from typing import List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DOCUMENTS = ["ffi/python/README.md", "ffi/README.md", "README.md", "docs/deploy.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks(document: str) -> List[Tuple[int, str]]:
    """The ```python blocks of a Markdown file: (line of the opening fence, code)."""
    with open(os.path.join(ROOT, document), encoding="utf-8") as f:
        text = f.read()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


class ReadmeExamples(unittest.TestCase):
    def test_the_documents_are_found_with_their_examples(self) -> None:
        counts = {d: len(python_blocks(d)) for d in DOCUMENTS}
        self.assertGreaterEqual(counts["ffi/README.md"], 4, counts)
        self.assertGreaterEqual(counts["README.md"], 1, counts)
        self.assertGreaterEqual(counts["docs/deploy.md"], 1, counts)

    def test_every_python_example_runs_as_written(self) -> None:
        ran = 0
        for document in DOCUMENTS:
            for line, code in python_blocks(document):
                with self.subTest(example=f"{document}:{line}"), \
                        tempfile.TemporaryDirectory() as directory:
                    code = code.replace("/dev/shm/", directory + "/")
                    out = subprocess.run([sys.executable, "-c", code], cwd=directory,
                                         capture_output=True, text=True, timeout=120)
                    self.assertEqual(
                        out.returncode, 0,
                        f"the example at {document}:{line} failed:\n{out.stderr}")
                    ran += 1
        self.assertGreaterEqual(ran, 6)


if __name__ == "__main__":
    unittest.main()
