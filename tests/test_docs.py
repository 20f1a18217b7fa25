"""The documentation holds: the site builds strictly, its environment-variable table names exactly
the variables the code reads, and every command and code block the README and the user guide show
runs (Python blocks on 2 real ranks, one launch per framework; cheap shell blocks too). A block
that cannot run here is marked in the Markdown with ``<!-- not-run: reason -->`` on the line
before it, and is listed with its reason in the output of ``test_code_blocks_marked``.

Run as a script (``python tests/test_docs.py BLOCKS.json``) it is the per-rank runner: each block
of the JSON list is executed in a fresh namespace, in order, and ``BLOCK-OK <id>`` printed.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tokenize
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "docs" / "gen"))
sys.path.insert(0, str(REPO / "tests"))

NAME = re.compile(r"(?:RELAX|HOROVOD)_[A-Z0-9_]+")
# Pages whose code blocks are tested: the README and every page of the site but those below
# (written by other changes; their blocks are C++ and diagrams, not commands to run).
NOT_TESTED = {"docs/architecture.md", "docs/security.md"}
TESTED_PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md")
                                     if str(p.relative_to(REPO)) not in NOT_TESTED)]
PYTHON = {"python", "py"}
SHELL = {"sh", "bash", "shell", "console"}
OUTPUT = {"text", "json"}
FENCE = re.compile(r"^```(\S*)\s*$")
NOT_RUN = re.compile(r"^<!-- not-run: (.+?) -->$")


@dataclass
class Block:
    """One fenced code block of a page."""

    page: str
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def ident(self) -> str:
        """page:line, for messages."""
        return f"{self.page}:{self.line}"


def blocks_of(page: str) -> list[Block]:
    """Every fenced block of ``page`` with its language and its not-run reason, if marked."""
    lines = (REPO / page).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = NOT_RUN.match(lines[start - 1].strip()) if start > 0 else None
        out.append(Block(page, start + 1, match.group(1), "\n".join(lines[start + 1:end]) + "\n",
                         marker.group(1) if marker else None))
        i = end + 1
    return out


def all_blocks() -> list[Block]:
    """The blocks of every tested page."""
    return [b for page in TESTED_PAGES for b in blocks_of(page)]


def runnable(language_set: set[str]) -> list[Block]:
    """The unmarked blocks of the given languages."""
    return [b for b in all_blocks() if b.language in language_set and b.not_run is None]


def is_tensorflow(block: Block) -> bool:
    """Blocks that import TensorFlow or Keras run in the TensorFlow launch."""
    return bool(re.search(r"\b(relaxlib_tf|tensorflow|keras)\b", block.code))


# ---- The environment-variable table ----

def names_read_by_code() -> set[str]:
    """Every RELAX_*/HOROVOD_* name the code passes around as a whole string literal (what getenv
    and os.environ take), found independently of the generator: C/C++ literals in cuda_ops/src and
    relaxlib_*/csrc, Python string tokens in relaxlib*/."""
    import config_table

    names: set[str] = set()
    for path in config_table.cpp_files():
        names.update(re.findall(rf'"({NAME.pattern})"', path.read_text(errors="replace")))
    for path in config_table.py_files():
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type == tokenize.STRING:
                try:
                    value = eval(token.string, {})  # a plain literal token: safe to evaluate
                except Exception:  # f-strings and the like are not names
                    continue
                if isinstance(value, str) and NAME.fullmatch(value):
                    names.add(value)
    return names


def test_config_table_matches_core():
    """The generated table lists every variable the code reads, and nothing else."""
    import config_table

    table = config_table.markdown_table()
    in_table = config_table.names_in_table(table)
    in_code = names_read_by_code()
    assert in_code, "found no RELAX_* names in the sources: the scan is broken"
    assert not in_code - in_table, f"read by the code but missing from the table: {sorted(in_code - in_table)}"
    assert not in_table - in_code, f"in the table but read nowhere: {sorted(in_table - in_code)}"
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines()[2:]}
    # Spot checks that the generator reads what the core parses, not just names.
    assert "`HOROVOD_FUSION_THRESHOLD`" in rows["RELAX_FUSION_THRESHOLD"]
    assert "64 MiB" in rows["RELAX_FUSION_THRESHOLD"]
    assert "(seconds)" in rows["RELAX_DEADLOCK_TIME"]
    # When the core's way of reading settings changes, the generator must follow: most engine
    # settings have a parsed range (a generator that reads only names would fall below this).
    ranged = [s for s in config_table.collect() if s.minimum and s.maximum]
    assert len(ranged) >= 15, f"only {len(ranged)} settings with a parsed range: update docs/gen/config_table.py"


# ---- The site ----

def test_site_builds_strict(tmp_path):
    """``mkdocs build --strict`` passes (no broken link, anchor, nav entry or API reference), and
    the generated pages hold the API and every variable."""
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    api = (site / "reference" / "algorithms" / "index.html").read_text()
    assert "relaxlib.algorithms.CompressedScatterReduce" in api and "step_scale" in api
    from relaxlib import algorithms
    undocumented = [n for n in algorithms.__all__ if f"relaxlib.algorithms.{n}" not in api]
    assert not undocumented, f"public names of relaxlib.algorithms missing from its API page: {undocumented}"
    for page, name in [("relaxlib_torch", "relaxlib_torch.DistributedOptimizer"),
                       ("relaxlib_tf", "relaxlib_tf.DistributedGradientTape"),
                       ("keras", "relaxlib_tf.keras.DistributedOptimizer"),
                       ("relaxrun", "relaxlib_launch.relaxrun.main")]:
        assert name in (site / "reference" / page / "index.html").read_text(), f"{name} not in the {page} page"
    environment = (site / "reference" / "environment" / "index.html").read_text()
    missing = sorted(n for n in names_read_by_code() if n not in environment)
    assert not missing, f"variables missing from the built environment page: {missing}"
    assert "<!-- generated:" not in (site / "performance" / "index.html").read_text()


# ---- Code blocks ----

def test_readme_is_a_front_door():
    """The README starts with the two commands, stays short, and its blocks say what they are."""
    text = (REPO / "README.md").read_text()
    assert len(text.encode()) <= 12 * 1024, f"README.md is {len(text.encode())} bytes (limit 12 KiB)"
    first = blocks_of("README.md")[0]
    commands = [line.split("#")[0].strip() for line in first.code.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"], commands
    assert text.index("```") < text.index("\n## "), "the two commands must come before any section"


def test_code_blocks_marked(capsys):
    """Every block of a tested page has a language; blocks that do not run say why."""
    unlabelled = [b.ident for b in all_blocks() if not b.language]
    assert not unlabelled, f"fenced blocks without a language (python, sh, text): {unlabelled}"
    unknown = [f"{b.ident} ({b.language})" for b in all_blocks() if b.language not in PYTHON | SHELL | OUTPUT]
    assert not unknown, f"blocks of a language this test cannot run or skip: {unknown}"
    with capsys.disabled():
        for b in all_blocks():
            if b.not_run:
                print(f"\nnot run: {b.ident}: {b.not_run}", end="")
    assert runnable(PYTHON), "no Python block found to run"


def test_shell_blocks_run():
    """The unmarked shell blocks run (they are cheap by construction: expensive ones are marked)."""
    env = dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    for block in runnable(SHELL):
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{block.ident} failed:\n{block.code}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"


def _run_python_blocks(blocks: list[Block], tmp_path: Path) -> None:
    from mpi_launch import run_ranks

    assert blocks
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps([{"id": b.ident, "code": b.code} for b in blocks]))
    # Blocks run in tmp_path (they may write files); a block one rank fails ends that rank, and
    # its peer's pending collective fails with ShutdownError instead of waiting.
    result = run_ranks(2, [sys.executable, str(Path(__file__).resolve()), str(spec)], timeout=300,
                       env={"TF_CPP_MIN_LOG_LEVEL": "2", "RELAX_DOCS_WORKDIR": str(tmp_path)})
    assert not result.timed_out and result.returncode == 0, result.report()
    for rank, output in enumerate(result.outputs):
        for b in blocks:
            assert f"BLOCK-OK {b.ident}" in output, f"rank {rank}: {b.ident} did not finish\n{result.report()}"


def test_python_blocks_torch(tmp_path):
    """The README's and the guide's PyTorch (and framework-free) blocks, on 2 ranks, one launch."""
    _run_python_blocks([b for b in runnable(PYTHON) if not is_tensorflow(b)], tmp_path)


def test_python_blocks_tensorflow(tmp_path):
    """The README's and the guide's TensorFlow / Keras blocks, on 2 ranks, one launch."""
    _run_python_blocks([b for b in runnable(PYTHON) if is_tensorflow(b)], tmp_path)


def run_blocks(spec_path: str) -> int:
    """Per-rank runner: each block in a fresh namespace, in order; stops at the first failure."""
    os.chdir(os.environ.get("RELAX_DOCS_WORKDIR", os.getcwd()))  # blocks may write files
    for block in json.loads(Path(spec_path).read_text()):
        namespace = {"__name__": "__main__"}
        try:
            exec(compile(block["code"], block["id"], "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"BLOCK-FAIL {block['id']}", flush=True)
            return 1
        print(f"BLOCK-OK {block['id']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_blocks(sys.argv[1]))
