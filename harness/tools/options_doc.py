"""The run options as a Markdown table, made from the one option table (``OPTIONS`` in
harness/config.py): ``python -m harness options`` prints it, docs/options.md holds it (a test
checks that they agree)."""

from __future__ import annotations

from harness.config import OPTIONS

BEGIN = "<!-- generated: python -m harness options (do not edit by hand) -->"
END = "<!-- end of generated options -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    """Every run option: its flag (with what it takes) and its help, default included."""
    rows = ["| option | meaning | read by |", "|---|---|---|"]
    for spec in OPTIONS:
        flag = spec.flag if spec.is_flag else f"{spec.flag} {spec.metavar or 'VALUE'}"
        repeat = " (repeatable)" if spec.repeat else ""
        readers = f"{spec.receiver}" + (f": {', '.join(spec.read_by)}" if spec.read_by else "")
        rows.append(f"| `{_cell(flag)}` | {_cell(spec.text)}{repeat} | {readers} |")
    return "\n".join(rows) + "\n"


def generated_section(text: str) -> str | None:
    """The generated table inside a document (between BEGIN and END), if it has one."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(BEGIN) : end].strip("\n") + "\n"
