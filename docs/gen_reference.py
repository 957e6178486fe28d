"""The generated reference pages: config keys, metric keys, experiments and the command line.

Each page is made from the code that defines it, so that it cannot drift:

- ``reference/config.md`` from the typed schema in :mod:`attnsim.config` (the dataclasses, their
  field types and defaults, and the comment beside or above each field; an Enum-typed key also
  lists its values and its Enum's docstring);
- ``reference/metrics.md`` from the statistics each finding declares (``Finding.statistics``) and
  the stages of :class:`attnsim.keys.Stage`, with one line each from ``docs/metric_descriptions.yaml``;
- ``reference/experiments.md`` from the bundled experiment files;
- ``reference/cli.md`` from :func:`attnsim.cli.build_parser`.

``docs/hooks.py`` adds them to the site at build time (``mkdocs build``); nothing is written into
``docs/``. ``python docs/gen_reference.py OUT_DIR`` writes them as files, to read them without MkDocs.
``tests/test_docs_reference.py`` fails when a config key or a statistic has no description.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import sys
import tokenize
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union, get_args, get_origin, get_type_hints

HERE = Path(__file__).resolve().parent
DESCRIPTIONS = HERE / "metric_descriptions.yaml"


# -- config keys --------------------------------------------------------------------------------------
def _field_comments(source: str) -> Dict[Tuple[str, str], str]:
    """``(class name, field name) -> comment``: the comment on a field's line, else the comment lines right above it."""
    comments: Dict[int, str] = {}
    code_lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.add(tok.start[0])
    out: Dict[Tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            line = item.lineno
            text = comments.get(item.end_lineno or line, "")
            if not text:
                above: List[str] = []
                n = line - 1
                while n in comments and n not in code_lines:
                    above.insert(0, comments[n])
                    n -= 1
                text = " ".join(above)
            out[(node.name, item.target.id)] = text
    return out


def _type_text(kind: Any) -> str:
    origin = get_origin(kind)
    if origin is Union:
        args = [a for a in get_args(kind) if a is not type(None)]
        return " or ".join(_type_text(a) for a in args) + " or null"
    if origin in (list, List):
        return f"list of {_type_text(get_args(kind)[0])}"
    if origin in (dict, Dict):
        return "map"
    if kind is Any:
        return "any"
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in kind)
    return getattr(kind, "__name__", str(kind))


def _enum_of(kind: Any) -> Optional[type]:
    for candidate in (kind, *get_args(kind)):
        if isinstance(candidate, type) and issubclass(candidate, Enum):
            return candidate
    return None


def _default_text(value: Any) -> str:
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "" or value == [] or value == {}:
        return "`''`" if value == "" else f"`{value}`"
    return f"`{value}`"


def _doc_sentence(enum: type) -> str:
    doc = " ".join((enum.__doc__ or "").split())
    return re.sub(r"^``[^`]+``:\s*", "", doc)


def config_rows() -> List[Dict[str, str]]:
    """One row per leaf key of :class:`attnsim.config.RunConfig`: key, type, default, description."""
    import inspect

    import attnsim.config as config

    comments: Dict[Tuple[str, str], str] = {}
    rows: List[Dict[str, str]] = []

    def comments_of(cls: type) -> Dict[Tuple[str, str], str]:
        """The field comments of the module that defines ``cls`` (read once per module)."""
        if (cls.__name__, "") not in comments:
            comments.update(_field_comments(Path(inspect.getsourcefile(cls)).read_text(encoding="utf-8")))
            comments[(cls.__name__, "")] = ""
        return comments

    def walk(cls: type, prefix: str) -> None:
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kind = hints[f.name]
            key = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(kind):
                walk(kind, key + ".")
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            text = comments_of(cls).get((cls.__name__, f.name), "")
            enum = _enum_of(kind)
            if enum is not None and not text:
                text = _doc_sentence(enum)
            rows.append(
                {"key": key, "type": _type_text(kind), "default": _default_text(default), "description": text, "group": prefix.rstrip(".") or "top level"}
            )

    walk(config.RunConfig, "")
    return rows


def undocumented_config_keys() -> List[str]:
    return [r["key"] for r in config_rows() if not r["description"].strip()]


def _cell(text: str) -> str:
    """A table cell: reStructuredText's ``code`` as Markdown's `code`, pipes escaped, one line."""
    return re.sub(r"``([^`]+)``", r"`\1`", text).replace("|", "\\|").replace("\n", " ")


def config_markdown() -> str:
    import attnsim.config as config

    groups: Dict[str, List[Dict[str, str]]] = {}
    for row in config_rows():
        groups.setdefault(row["group"], []).append(row)
    classes = {f.name: f.type for f in dataclasses.fields(config.RunConfig)}
    hints = get_type_hints(config.RunConfig)
    lines = [
        "# Config keys",
        "",
        "Every key of the typed schema (`attnsim/config/schema.py`), generated from its dataclasses when the site is built.",
        "The *default* is the schema's; an experiment, its config groups (`configs/`) and the command line may set",
        "another value: `attnsim show NAME` prints the resolved config of experiment `NAME`.",
        "How values are read and overridden: [Configuration](../concepts/configuration.md).",
        "",
    ]
    for group, rows in groups.items():
        cls = hints.get(group) if group in classes else None
        lines += [f"## `{group}`" if group != "top level" else "## Top level", ""]
        if cls is not None and cls.__doc__:
            lines += [" ".join(cls.__doc__.split()), ""]
        lines += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        lines += [f"| `{r['key']}` | {_cell(r['type'])} | {_cell(r['default'])} | {_cell(r['description'])} |" for r in rows]
        lines.append("")
    return "\n".join(lines)


# -- metric keys --------------------------------------------------------------------------------------
def _descriptions() -> Dict[str, Any]:
    import yaml

    return yaml.safe_load(DESCRIPTIONS.read_text(encoding="utf-8"))


def declared_statistics() -> Dict[str, Tuple[str, List[str]]]:
    """``finding -> (description, statistics)`` for every registered finding; rollout's names for text and images."""
    from types import SimpleNamespace

    from attnsim.findings.categories import TokenCategories
    from attnsim.findings.registry import FINDINGS

    out: Dict[str, Tuple[str, List[str]]] = {}
    for name in FINDINGS:
        cls = FINDINGS[name]
        stats = list(cls.statistics)
        if hasattr(cls, "_statistics"):  # statistics that depend on the token categories (rollout)
            stats = []
            for vision in (False, True):
                stats += [s for s in cls._statistics(SimpleNamespace(categories=TokenCategories(None, vision))) if s not in stats]
        out[name] = (cls.description, stats)
    return out


def _pattern(entry: str) -> "re.Pattern[str]":
    return re.compile("^" + re.sub(r"<[a-z_]+>", "[a-z_]+", re.escape(entry).replace("\\<", "<").replace("\\>", ">")) + "$")


def _match(stat: str, entries: Dict[str, str]) -> Optional[str]:
    if stat in entries:
        return stat
    for entry in entries:
        if "<" in entry and _pattern(entry).match(stat):
            return entry
    return None


def undocumented_statistics() -> List[str]:
    """``finding/statistic`` of every declared statistic without a line in metric_descriptions.yaml."""
    described = _descriptions()
    missing = []
    for finding, (_, stats) in declared_statistics().items():
        entries = {k: v for k, v in (described.get(finding) or {}).items() if k != "corpus"}
        missing += [f"{finding}/{s}" for s in stats if _match(s, entries) is None]
    return missing


def stale_descriptions() -> List[str]:
    """Entries of metric_descriptions.yaml (outside ``corpus:``) that match no declared statistic."""
    declared = declared_statistics()
    stale = []
    for finding, entries in _descriptions().items():
        if finding not in declared:
            stale.append(finding)
            continue
        stats = declared[finding][1]
        for entry in entries:
            if entry != "corpus" and not any(_pattern(entry).match(s) for s in stats):
                stale.append(f"{finding}/{entry}")
    return stale


def metrics_markdown() -> str:
    from attnsim.keys import Stage

    described = _descriptions()
    lines = [
        "# Metric keys",
        "",
        "Generated from the statistics each finding declares (`Finding.statistics`) and from `attnsim.keys`.",
        "",
        "## The rule",
        "",
        "One module, `attnsim.keys.MetricKey`, formats and parses every key:",
        "",
        "| key | what |",
        "| --- | --- |",
        "| `<finding>/<statistic>/L<layer>/H<head>` | one head, e.g. `distance/short_range_share/L03/H07` |",
        "| `<finding>/<statistic>/L<layer>` | layer mean over the layer's heads, e.g. `distance/short_range_share/L03` |",
        "| `<finding>/<statistic>` | model mean, e.g. `distance/short_range_share` |",
        "",
        "Layers and heads are 0-indexed and written with at least two digits. A statistic's chance level is the",
        "statistic of the same name ending in `_chance`. Characters outside `[A-Za-z0-9_./ -]` become `_`.",
        "Non-finite values are never logged: they are counted in `zz_run/skipped_nonfinite` and listed in the tag",
        "`attnsim.skipped_nonfinite`.",
        "",
        "Which keys a run logs:",
        "",
        "- the model mean of **every** statistic;",
        "- layer means of the statistics matching `stats.per_layer` (fnmatch patterns over `finding/statistic`;",
        "  default `['*']`; `paper` lists its headline statistics) or `stats.per_head`;",
        "- per-head keys only for the experiment's headline statistics, `stats.per_head` (`csm` logs `csm/mean`,",
        "  `distance/short_range_share` and `distance/high_mean_distance` per head; `paper` none);",
        "- run bookkeeping under `zz_run/` (below);",
        "- comparison series that MLflow draws as line charts, in sections that sort first: `0_heads/<finding>/<statistic>/layer NN`",
        "  (the per-head statistics; MLflow step = head, one key per layer) and `0_layers/<finding>/<statistic>` (every statistic",
        "  with layer means; step = layer). They repeat the values above; nothing in attnsim reads them back",
        "  ([Tracking](../concepts/tracking.md#metric-keys-in-the-mlflow-ui)).",
        "",
        "Every head of every statistic is in the table `tables/<finding>_heads.csv` (and `.json`) and in the figure",
        "`figures/<finding>/heads.png`; `attnsim compare` and `attnsim report` read a layer mean a run did not log",
        "from that table. Formulas and chance levels: [Statistics](../concepts/statistics.md).",
        "",
        "## Statistics by finding",
        "",
    ]
    for finding, (description, stats) in declared_statistics().items():
        entries = described.get(finding) or {}
        corpus = entries.get("corpus") or {}
        lines += [f"### `{finding}`", "", description[:1].upper() + description[1:] + ".", "", "| statistic | meaning |", "| --- | --- |"]
        shown = []
        for stat in stats:
            entry = _match(stat, {k: v for k, v in entries.items() if k != "corpus"})
            if entry is not None and "<" in entry:
                if entry not in shown:
                    shown.append(entry)
                    lines.append(f"| `{finding}/{entry}` | {_cell(entries[entry])} |")
            else:
                lines.append(f"| `{finding}/{stat}` | {_cell(entries.get(stat, ''))} |")
        lines.append("")
        if corpus:
            lines += ["Corpus-level numbers (model key only, no layer or head):", "", "| key | meaning |", "| --- | --- |"]
            lines += [f"| `{finding}/{k}` | {_cell(v)} |" for k, v in corpus.items()]
            lines.append("")
    lines += [
        "## Run bookkeeping: `zz_run/`",
        "",
        "| key | meaning |",
        "| --- | --- |",
        "| `zz_run/windows` | windows folded into the statistics |",
        "| `zz_run/skipped_nonfinite` | statistic values that were NaN or infinite, and so not logged |",
    ]
    for stage in Stage:
        lines.append(f"| `zz_run/time_{stage.value}` | seconds of the stage `{stage.value}` |")
    lines += [
        "| `zz_run/time_fit`, `zz_run/windows_train`, `zz_run/windows_val` | `attnsim finetune` only |",
        "",
        "The stages, in the order they run: " + ", ".join(f"`{s.value}`" for s in Stage) + ". `total` runs from the",
        "command's start to the moment the timings are logged; `unattributed` is `total` less every other stage.",
        "`zz_run` sorts after every finding in MLflow's chart view.",
        "",
        "## Fine-tuning and sweeps",
        "",
        "| key | run | meaning |",
        "| --- | --- | --- |",
        "| `train/loss`, `train/accuracy`, `train/lr` | `attnsim finetune` | every optimizer step |",
        "| `val/loss`, `val/accuracy` | `attnsim finetune` | at every validation (MLflow step = optimizer steps done) |",
        "| `sweep/global_step` | a sweep's child | the checkpoint's global step |",
        "| every model and layer mean | a sweep's parent | logged at MLflow step = the checkpoint's global step: curves over training |",
        "",
    ]
    return "\n".join(lines)


# -- experiments and command line -----------------------------------------------------------------------
def experiments_markdown() -> str:
    from attnsim.config import list_experiments

    lines = [
        "# Experiments",
        "",
        "The bundled experiments (`attnsim list`), generated from the files under `experiments/`.",
        "`attnsim show NAME` prints one's resolved config; `attnsim run NAME [overrides]` runs it.",
        "",
        "| experiment | what it measures |",
        "| --- | --- |",
    ]
    lines += [f"| `{name}` | {_cell(description)} |" for name, description in list_experiments().items()]
    return "\n".join(lines) + "\n"


def cli_markdown() -> str:
    import argparse

    from attnsim.cli import build_parser

    parser = build_parser()
    lines = [
        "# Command line",
        "",
        "Generated from `attnsim.cli.build_parser`: the help of `attnsim` and of each command.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        sub.prog = f"attnsim {name}"
        lines += [f"## `attnsim {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


PAGES = {
    "reference/config.md": config_markdown,
    "reference/metrics.md": metrics_markdown,
    "reference/experiments.md": experiments_markdown,
    "reference/cli.md": cli_markdown,
}


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else "site-reference")
    for page, make in PAGES.items():
        target = out / page
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(make(), encoding="utf-8")
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
