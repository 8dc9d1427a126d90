"""Tuning the survey writer on a split's survey dev hold-outs: reference recall of graft-survey
with its default settings and with one setting changed at a time, against the baseline writer
(dense retrieval, no rerank, no verification) on the same hold-outs, with the same settings where
the two writers share them.

Each variant writes a whole survey per hold-out (as `graft eval run --suite survey` does, as of the
hold-out's year), so a variant costs what one suite run costs. Tune on `--part dev`; the `test`
hold-outs are for the reported table (`graft eval run SPLITDIR --suite survey`).

    python -m experiments.survey_tuning --split SPLITDIR [--part dev] \\
        [--set graph_seeds=10,40] [--set pool=60] [--combo "recency_weight=0 relative_relevance=0.4"] \\
        [--limit N] [--name cs768]

`--set` rows change one setting each; a `--combo` row changes all the settings it lists at once.

Writes docs/results/survey_tuning_{name}.{md,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import tempfile
from pathlib import Path
from typing import Any

from experiments.common import add_results_argument, parser, write_tables


def parse_settings(specs: list[str], base: Any) -> list[tuple[str, Any]]:
    """`name=v1,v2` specs -> [(name, value)], each value parsed as the type of `base`'s field.

    Raises:
        ValueError: an unknown setting, a malformed spec or a value of the wrong type.
    """
    fields = {f.name for f in dataclasses.fields(base)}
    out: list[tuple[str, Any]] = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not values.strip():
            raise ValueError(f"--set {spec!r}: expected NAME=V1[,V2...]")
        if name not in fields:
            raise ValueError(f"--set {spec!r}: unknown survey setting {name!r}")
        kind = type(getattr(base, name))
        for raw in values.split(","):
            raw = raw.strip()
            if kind is bool:
                if raw.lower() not in ("true", "false"):
                    raise ValueError(f"--set {spec!r}: {name} takes true or false")
                out.append((name, raw.lower() == "true"))
            else:
                try:
                    out.append((name, kind(raw)))
                except ValueError:
                    raise ValueError(f"--set {spec!r}: {raw!r} is not a {kind.__name__}") from None
    return out


def parse_combo(spec: str, base: Any) -> dict[str, Any]:
    """`"name=v name2=v2"` -> {name: value, ...}, each one value, parsed as `parse_settings` parses.

    Raises:
        ValueError: a malformed pair, several values for one setting, a setting named twice, or
            what `parse_settings` refuses.
    """
    changes: dict[str, Any] = {}
    pairs = spec.split()
    if not pairs:
        raise ValueError("--combo '': expected 'NAME=V NAME2=V2 ...'")
    for pair in pairs:
        parsed = parse_settings([pair], base)
        if len(parsed) != 1:
            raise ValueError(f"--combo {spec!r}: {pair!r} gives more than one value; a combo row takes one each")
        name, value = parsed[0]
        if name in changes:
            raise ValueError(f"--combo {spec!r}: {name} is set twice")
        changes[name] = value
    return changes


def add_variant_options(ap: argparse.ArgumentParser) -> None:
    """The `--set` and `--combo` options of a benchmark that compares survey settings."""
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="a survey setting and the values to try, NAME=V1[,V2...] (repeatable)")
    ap.add_argument("--combo", dest="combos", action="append", default=[],
                    help="settings changed together in one row, 'NAME=V NAME2=V2' (repeatable)")


def parse_variants(ap: argparse.ArgumentParser, args: argparse.Namespace, base: Any) -> list[dict[str, Any]]:
    """The rows `--set` and `--combo` ask for, each as {setting: value} changes to `base` (the
    parser exits with the reason on a bad one)."""
    try:
        variants = [{name: value} for name, value in parse_settings(args.sets, base)]
        return variants + [parse_combo(spec, base) for spec in args.combos]
    except ValueError as exc:
        ap.error(str(exc))


def variant_label(changes: dict[str, Any]) -> tuple[str, Any]:
    """(setting, value) of a row: "default" and None, one setting and its value, or `a + b` and
    "x / y" for settings changed together."""
    setting = " + ".join(changes) or "default"
    value = (None if not changes else next(iter(changes.values())) if len(changes) == 1
             else " / ".join(str(v) for v in changes.values()))
    return setting, value


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--split", required=True, help="split directory (graft eval prepare + graft build)")
    ap.add_argument("--index", default=None, help="index directory (default SPLITDIR/index)")
    ap.add_argument("--part", default="dev", choices=("dev", "test"), help="survey hold-outs: dev or test")
    add_variant_options(ap)
    ap.add_argument("--limit", type=int, default=None, help="only the first N hold-outs")
    ap.add_argument("--name", default=None, help="table name: survey_tuning_{name}.md (default: the corpus)")
    add_results_argument(ap)
    args = ap.parse_args(argv)

    from eval.runner import build_settings, corpus_name
    from eval.splits import read_split
    from eval.survey_suite import recall_ratio, survey_suite, system_config
    from graft.encoder import index_encoder
    from graft.index import Index
    from graft.manifest import library_versions
    from graft.survey.config import SurveyConfig

    base = SurveyConfig()
    variants = parse_variants(ap, args, base)
    split_dir = Path(args.split)
    split = read_split(split_dir)
    index_dir = Path(args.index) if args.index else split_dir / "index"
    idx = Index.open(index_dir)
    encoder = index_encoder(idx)
    name = args.name or corpus_name(split)

    def run(system: str, config: SurveyConfig, out: Path) -> list[dict[str, Any]]:
        res = survey_suite(split_dir, index_dir, systems=[system], limit=args.limit, part=args.part, support_set=0,
                           config=config, out_dir=out, encoder=encoder)
        return res["per_query"][system]

    rows: list[dict[str, Any]] = []
    baselines: list[tuple[Any, list[float]]] = []  # (the baseline's effective settings, its recalls)

    def baseline_for(config: SurveyConfig, out: Path) -> list[float]:
        """The baseline under `config`'s shared settings (pool, sections, ...), run once per distinct one."""
        effective = system_config("baseline-survey", config)
        for seen, recall in baselines:
            if seen == effective:
                return recall
        recall = [r["reference_recall"] for r in run("baseline-survey", config, out)]
        baselines.append((effective, recall))
        return recall

    with tempfile.TemporaryDirectory(prefix="survey-tuning-") as tmp:
        for number, changes in enumerate([{}, *variants]):
            config = dataclasses.replace(base, **changes)
            setting, value = variant_label(changes)
            base_recall = baseline_for(config, Path(tmp) / f"baseline-{number}")
            per = run("graft-survey", config, Path(tmp) / f"variant-{number}")
            recall = [r["reference_recall"] for r in per]
            cmp = recall_ratio(recall, base_recall)
            n = len(per)
            rows.append({"setting": setting, "value": value, "hold_outs": n,
                         "reference_recall": sum(recall) / n,
                         "pool_recall": sum(r["pool_recall"] for r in per) / n,
                         "reference_precision": sum(r["reference_precision"] for r in per) / n,
                         "fabricated": sum(r["fabricated_references"] for r in per),
                         "baseline_recall": sum(base_recall) / n,
                         "ratio": cmp["ratio"], "low": cmp["low"], "high": cmp["high"],
                         "wins": cmp["wins"], "ties": cmp["ties"], "losses": cmp["losses"],
                         "seconds": sum(r["seconds"] for r in per) / n})
            print(f"{setting}={value}: recall {rows[-1]['reference_recall']:.3f} ratio {cmp['ratio']:.2f}",
                  flush=True)

    base_mean = rows[0]["baseline_recall"]
    command = "python -m experiments.survey_tuning " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "split": str(split_dir),
            "corpus_hash": split["corpus_hash"], "part": args.part, "index": str(index_dir),
            "build": build_settings(idx), "baseline_reference_recall": base_mean,
            "defaults": {k: getattr(base, k) for changes in variants for k in changes},
            "versions": library_versions()}
    lines = [
        f"# Survey writer settings on the {args.part} hold-outs — {name}", "",
        f"Command: `{command}`  ",
        f"Date: {meta['date']} · corpus hash `{split['corpus_hash'][:16]}` · part {args.part} · "
        f"{rows[0]['hold_outs']} hold-outs · title weight {meta['build']['title_weight']}", "",
        "| setting | value | ref. recall | pool recall | ref. precision | fabricated | baseline recall "
        "| ratio to baseline | 95% interval | higher / equal / lower | s per survey |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        value = "—" if r["value"] is None else str(r["value"])
        lines.append(f"| {r['setting']} | {value} | {r['reference_recall']:.3f} | {r['pool_recall']:.3f} "
                     f"| {r['reference_precision']:.3f} "
                     f"| {r['fabricated']} | {r['baseline_recall']:.3f} | {r['ratio']:.2f} | {r['low']:.2f}–{r['high']:.2f} "
                     f"| {r['wins']} / {r['ties']} / {r['losses']} | {r['seconds']:.1f} |")
    lines += ["", "- default = `SurveyConfig()`'s settings; each other row changes the setting(s) it names "
              "(`a + b` with values `x / y`: both at once)",
              "- baseline: the AutoSurvey-like writer (dense retrieval, no rerank, no verification) with the row's "
              "settings where it shares them (pool, outline sizes, retrieval depth), so it is rerun when they change",
              "- ratio: graft-survey's mean reference recall over the baseline's, paired bootstrap interval "
              "(2000 resamples of the hold-outs)",
              "- pool recall: graft-survey's reference recall had it cited its whole pool (the papers after the topic "
              "rerank that the outline is drawn from)"]
    write_tables(args.results, f"survey_tuning_{name}", meta, rows, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
