"""Generates the table of every RELAX_* / HOROVOD_* environment variable from the sources.

Nothing here is written by hand per setting: the names are the string literals the core
(cuda_ops/src), the framework extensions (relaxlib_*/csrc) and the Python packages (relaxlib*/)
pass to getenv / os.environ; the fallback name, bounds, unit and default come from the call that
reads each one (and, for the engine's settings, from EngineConfig's initializers in
cuda_ops/src/engine/config.h); the meaning is the code comment next to that call or field.
Run it directly to print the table: ``python docs/gen/config_table.py``.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = r"(?:RELAX|HOROVOD)_[A-Z0-9_]+"
CPP_SUFFIXES = (".cc", ".h", ".cu", ".cpp")
# Where settings are read: the core, the frameworks' C++ glue and their Python packages.
CPP_ROOTS = ("cuda_ops/src", "relaxlib_torch/csrc", "relaxlib_tf/csrc")
PY_ROOTS = ("relaxlib", "relaxlib_torch", "relaxlib_tf")


@dataclass
class Setting:
    """One environment variable as the sources read it."""

    name: str
    fallbacks: list[str] = field(default_factory=list)
    kind: str = ""
    minimum: str = ""
    maximum: str = ""
    unit: str = ""
    default: str = ""
    meaning: str = ""
    read_in: list[str] = field(default_factory=list)


def cpp_files(repo: Path = REPO) -> list[Path]:
    """The C/C++ sources that may read settings."""
    return sorted(p for root in CPP_ROOTS for p in (repo / root).rglob("*") if p.suffix in CPP_SUFFIXES)


def py_files(repo: Path = REPO) -> list[Path]:
    """The Python modules that may read settings."""
    return sorted(p for root in PY_ROOTS for p in (repo / root).rglob("*.py"))


def _strip_cpp_comments(text: str) -> str:
    """Blanks out comments (keeping offsets and string literals), so calls parse cleanly."""
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"',
                  lambda m: m.group(0) if m.group(0).startswith('"') else " " * len(m.group(0)), text, flags=re.S)


def _constants(texts: list[str]) -> dict[str, float]:
    """``constexpr TYPE kName = EXPR;`` constants of the config sources, evaluated in order."""
    values: dict[str, float] = {}
    for text in texts:
        for name, expr in re.findall(r"constexpr\s+[\w:]+\s+(\w+)\s*=\s*([^;]+);", text):
            value = _evaluate(expr, values)
            if value is not None:
                values[name] = value
    return values


def _evaluate(expr: str, names: dict[str, float]) -> float | None:
    """A C++ constant expression of literals, shifts and arithmetic, or None if it is anything else."""
    expr = re.sub(r"(?<=\d)(?:ll|LL|ull|ULL|u|U|l|L)\b", "", expr.strip())
    expr = re.sub(r"(\d+\.\d*|\d+)[fF]\b", r"\1", expr)
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            ops = {ast.LShift: lambda a, b: int(a) << int(b), ast.Mult: lambda a, b: a * b,
                   ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b}
            if type(node.op) in ops:
                return ops[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(expr)

    try:
        return ev(tree.body)
    except (ValueError, TypeError):
        return None


def human(value: float | None, unit: str = "") -> str:
    """1073741824 bytes -> '1 GiB', 86400 -> '86400'; whole numbers without a decimal point."""
    if value is None:
        return ""
    if "byte" in unit and value >= 1024 and int(value) == value:
        for suffix, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value % scale == 0:
                return f"{int(value) // scale} {suffix}"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _call_args(text: str, start: int) -> list[str] | None:
    """The top-level arguments of the call whose '(' is at ``start``."""
    depth, args, current, i = 0, [], [], start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = text.index('"', i + 1)
            while text[end - 1] == "\\":
                end = text.index('"', end + 1)
            current.append(text[i:end + 1])
            i = end + 1
            continue
        if ch in "([{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args
        elif ch == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    return None


def _comment_before(lines: list[str], index: int) -> str:
    """The ``//`` or ``#`` comment lines directly above line ``index`` (0-based), joined."""
    out = []
    j = index - 1
    while j >= 0 and lines[j].strip().startswith(("//", "#")):
        out.insert(0, lines[j].strip().lstrip("/#").strip())
        j -= 1
    return " ".join(out)


def _trailing_comment(line: str) -> str:
    """The ``// ...`` text at the end of a C++ line."""
    code = _strip_cpp_comments(line)
    at = len(code.rstrip()) if code.strip() != line.strip() else -1
    match = re.search(r"//\s*(.*)$", line)
    return match.group(1).strip() if match and at >= 0 else ""


def _comment_mentioning(name: str, paths: list[Path]) -> str:
    """The first sentence of a ``//`` comment block in ``paths`` that names the setting."""
    for path in paths:
        block: list[str] = []
        for line in path.read_text(errors="replace").splitlines() + [""]:
            stripped = line.strip()
            if stripped.startswith("//"):
                block.append(stripped.lstrip("/").strip())
                continue
            text = " ".join(block)
            block = []
            if re.search(rf"\b{name}\b", text):
                for sentence in re.split(r"(?<=[.;])\s+", text):
                    if name in sentence:
                        return sentence
    return ""


def _field_defaults(repo: Path, constants: dict[str, float]) -> dict[str, tuple[str, str]]:
    """EngineConfig's fields: setting name -> (default text, comment) from config.h's initializers."""
    header = repo / "cuda_ops/src/engine/config.h"
    out: dict[str, tuple[str, str]] = {}
    if not header.exists():
        return out
    for line in header.read_text().splitlines():
        match = re.match(r"\s*[\w:<>]+\s+(\w+)\s*=\s*([^;]+);\s*//\s*(.*)$", line)
        if not match:
            continue
        _, expr, comment = match.groups()
        names = re.findall(NAME, comment)
        if not names:
            continue
        expr = expr.strip()
        if expr.startswith('"'):
            default = expr.strip('"')
        elif expr in ("true", "false"):
            default = ""  # a flag derived from the string setting; its default is the setting's text
        else:
            value = _evaluate(expr, constants)
            default = "by topology" if value == -1 else human(value, "bytes" if "bytes" in match.group(1) else "")
        meaning = re.sub(rf"^{NAME}\s*[:=]?\s*", "", comment).strip()
        out.setdefault(names[0], (default, meaning))
    return out


def _from_cpp(repo: Path, settings: dict[str, Setting]) -> None:
    """Settings the C++ sources read: getenv / lookup / read_* / env_or calls and their arguments."""
    config_texts = [p.read_text() for p in (repo / "cuda_ops/src/engine/config.h",
                                            repo / "cuda_ops/src/engine/config.cc") if p.exists()]
    constants = _constants(config_texts)
    defaults = _field_defaults(repo, constants)
    for path in cpp_files(repo):
        raw = path.read_text(errors="replace")
        code = _strip_cpp_comments(raw)
        lines = raw.splitlines()
        rel = str(path.relative_to(repo))
        for match in re.finditer(rf'"({NAME})"', code):
            name = match.group(1)
            line_no = code.count("\n", 0, match.start())
            # Every literal is a setting (a name only in a message would still be one users may
            # set); its details come from the call or initializer it opens, if it opens one:
            # read_integer("X", "HOROVOD_X", field, min, max, "unit", error), getenv("X"), or a
            # table entry {"X", "HOROVOD_X", ...}.
            opening = max(code.rfind("(", 0, match.start()), code.rfind("{", 0, match.start()))
            if opening < 0 or code[opening + 1:match.start()].strip():
                if name in settings or name.startswith("RELAX_"):
                    setting = settings.setdefault(name, Setting(name))
                    if rel not in setting.read_in:
                        setting.read_in.append(rel)
                continue
            args = _call_args(code, opening) or [f'"{name}"']
            callee = re.search(r"([\w:]+)\s*$", code[:opening])
            callee_name = callee.group(1) if callee and code[opening] == "(" else ""
            setting = settings.setdefault(name, Setting(name))
            if rel not in setting.read_in:
                setting.read_in.append(rel)
            literal_args = [a.strip('"') for a in args[1:] if re.fullmatch(rf'"{NAME}"', a)]
            for fallback in literal_args:
                if fallback not in setting.fallbacks:
                    setting.fallbacks.append(fallback)
            if callee_name in ("read_integer", "read_real") and len(args) >= 6:
                setting.kind = "integer" if callee_name == "read_integer" else "number"
                setting.unit = args[5].strip('"')
                setting.minimum = human(_evaluate(args[3], constants), setting.unit)
                setting.maximum = human(_evaluate(args[4], constants), setting.unit)
            elif callee_name == "read_auto_on_off":
                setting.kind = "auto, on, off"
            if not setting.meaning:
                setting.meaning = _comment_before(lines, line_no)
    for name, (default, meaning) in defaults.items():
        setting = settings.setdefault(name, Setting(name))
        setting.default = setting.default or default
        if meaning:
            setting.meaning = meaning + (" " + setting.meaning if setting.meaning else "")
    header = repo / "cuda_ops/src/engine/config.h"
    for setting in settings.values():
        if not setting.meaning:
            setting.meaning = _comment_mentioning(setting.name, [repo / r for r in setting.read_in] + [header])
    # HOROVOD_X read on its own right after RELAX_X (runtime.cc's timeline) is RELAX_X's fallback.
    for name in [n for n in settings if n.startswith("HOROVOD_")]:
        twin = "RELAX_" + name[len("HOROVOD_"):]
        if twin in settings and settings[name].read_in == settings[twin].read_in:
            settings[twin].fallbacks.append(name)
            del settings[name]
    for setting in settings.values():
        for fallback in setting.fallbacks:
            settings.pop(fallback, None)


def _docstring_of_enclosing(tree: ast.AST, line: int) -> str:
    """The first sentence of the docstring of the innermost function containing ``line``."""
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno > best.lineno:
                best = node
    doc = " ".join((ast.get_docstring(best) or "").split()) if best else ""
    return re.split(r"(?<=\.)\s", doc, maxsplit=1)[0] if doc else ""


def _from_python(repo: Path, settings: dict[str, Setting]) -> None:
    """Settings the Python packages read: os.environ.get / os.getenv / os.environ[...] with defaults."""
    for path in py_files(repo):
        text = path.read_text()
        tree = ast.parse(text)
        rel = str(path.relative_to(repo))
        lines = text.splitlines()
        for node in ast.walk(tree):
            name = default = None
            if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str) and re.fullmatch(NAME, node.args[0].value)):
                func = ast.unparse(node.func)
                if func.endswith(("environ.get", "getenv")):
                    name = node.args[0].value
                    if len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                        default = node.args[1].value
            elif (isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ")
                  and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
                  and re.fullmatch(NAME, node.slice.value) and isinstance(node.ctx, ast.Load)):
                name = node.slice.value
            if not name:
                continue
            setting = settings.setdefault(name, Setting(name))
            if rel not in setting.read_in:
                setting.read_in.append(rel)
            if default not in (None, "") and not setting.default:
                setting.default = str(default)
            if not setting.meaning:
                setting.meaning = (_comment_before(lines, node.lineno - 1)
                                   or _docstring_of_enclosing(tree, node.lineno))


def collect(repo: Path = REPO) -> list[Setting]:
    """Every setting the sources read, sorted by name."""
    settings: dict[str, Setting] = {}
    _from_cpp(repo, settings)
    _from_python(repo, settings)
    return sorted(settings.values(), key=lambda s: s.name)


def _cell(text: str, limit: int = 0) -> str:
    text = " ".join(text.replace("|", "\\|").split())
    return text[:limit].rsplit(" ", 1)[0] + " …" if limit and len(text) > limit else text


def markdown_table(settings: list[Setting] | None = None) -> str:
    """The settings as a Markdown table (variable, Horovod name, accepted values, default, meaning, read in)."""
    settings = collect() if settings is None else settings
    rows = ["| variable | Horovod name | accepted values | default | meaning (from the code) | read in |",
            "| --- | --- | --- | --- | --- | --- |"]
    for s in settings:
        if s.kind in ("integer", "number"):
            values = f"{s.kind} in [{s.minimum}, {s.maximum}]" + (f" ({s.unit})" if s.unit else "")
        else:
            values = s.kind
        rows.append("| " + " | ".join([
            f"`{s.name}`", ", ".join(f"`{f}`" for f in s.fallbacks), _cell(values), _cell(s.default or ""),
            _cell(s.meaning, 240), "<br>".join(f"`{r}`" for r in s.read_in)]) + " |")
    return "\n".join(rows) + "\n"


def names_in_table(markdown: str) -> set[str]:
    """Every variable name in the first two columns of a table made by markdown_table."""
    names: set[str] = set()
    for line in markdown.splitlines()[2:]:
        cells = line.split(" | ")
        names.update(re.findall(NAME, " ".join(cells[:2])))
    return names


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
