"""Per-query latency of the generative retriever's decoding, against plain HF constrained generation.

For each query paper (the first N papers of an index with DocIDs), all of its facet items are
decoded with the same model, tries and beams, two ways, in the same run:

- graft: `graft.decoding.decode_items` — every item of the four facets in one batched `generate`
  call, masked by `TrieLogitsProcessor` (vectorised scatter of the allowed ids, prefix cache),
  each prompt encoded once and its key/value cache shared by the beams;
- graft, prompt per beam (`--unshared`): the same without prompt sharing (plain `generate`
  prefill), to show where the time goes;
- baseline: plain `generate(..., prefix_allowed_tokens_fn=...)` over the trie, one call per facet
  (that facet's items batched), as a straightforward implementation would do it.

The decoders take turns query by query (after one warm-up query each), so load from other work
on a shared machine falls on all of them alike. Reports p50/p95 per query (seconds) and writes
docs/results/query_latency{TAG}.{md,json}. Weights can be random (`--random`): only speed is
measured.

    python -m experiments.query_latency --index INDEX [--model smollm2-135m|tiny|PATH]
        [--queries 50] [--beams 20] [--device cpu|cuda] [--random] [--unshared] [--tag _x]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from experiments.common import add_results_argument, parser


def baseline_decode(model, tokenizer, tries, items, num_beams: int, max_new_tokens: int = 13) -> list:
    """One `generate(prefix_allowed_tokens_fn=...)` call per facet."""
    import torch

    from graft.prompts import encode_prompt

    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    device = next(model.parameters()).device
    out = []
    for facet in dict.fromkeys(f for f, _ in items):
        texts = [t for f, t in items if f == facet]
        prompts = [encode_prompt(tokenizer, facet, t, max_tokens=256) for t in texts]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            att[i, width - len(p):] = 1
        trie = tries[facet]

        def allowed(_batch_id, seq, trie=trie, width=width):
            nxt = trie.allowed_next(seq[width:].tolist(), eos_id=eos)
            return nxt or [eos]

        with torch.inference_mode():
            gen = model.generate(input_ids=ids.to(device), attention_mask=att.to(device), num_beams=num_beams,
                                 num_return_sequences=num_beams, max_new_tokens=max_new_tokens, do_sample=False,
                                 prefix_allowed_tokens_fn=allowed, eos_token_id=eos, pad_token_id=pad,
                                 output_scores=True, return_dict_in_generate=True)
        out.append(gen.sequences_scores)
    return out


def _model(args: argparse.Namespace) -> tuple:
    """The model to time: pretrained, or random weights of the base (or Llama-3.2-1B's) architecture."""
    from transformers import AutoConfig, LlamaConfig

    from training.base_models import (
        TINY,
        ensure_smollm2,
        load_tokenizer,
        random_model,
        resolve_base_model,
        tiny_config,
    )

    if not args.random:
        if args.arch != "base":
            raise SystemExit("--arch needs --random (no pretrained Llama-3.2-1B weights here)")
        return resolve_base_model(args.model)
    tokenizer = load_tokenizer(args.model)
    if args.arch == "llama-3.2-1b":
        from experiments.gpu.gpu_train import LLAMA_1B

        config = LlamaConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id, **LLAMA_1B)
    elif args.model == TINY:
        config = tiny_config(tokenizer)
    else:
        folder = ensure_smollm2() if args.model == "smollm2-135m" else Path(args.model)
        config = AutoConfig.from_pretrained(folder)
    config.pad_token_id = tokenizer.pad_token_id
    return random_model(config, seed=0), tokenizer


def stage(args: argparse.Namespace) -> int:
    """Stage the GPU latency run in two carry folders: `STAGE/a` = the polars wheels (the GPU image
    lacks polars; the runtime wheel alone is ~54 MB), `STAGE/b` = marisa-trie's wheel, the index's
    DocIDs and manifest, the query items, and the base model's config and tokenizer (no weights:
    the GPU run times random weights)."""
    import shutil
    import subprocess

    from training.base_models import ensure_smollm2

    root = Path(args.stage)
    a, b = root / "a", root / "b"
    for d in (a, b):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    index = Path(args.index)
    (b / "index").mkdir()
    shutil.copy2(index / "manifest.json", b / "index" / "manifest.json")
    shutil.copytree(index / "docids", b / "index" / "docids")
    main(["--index", str(index), "--queries", str(args.queries), "--dump-queries", str(b / "queries.json")])
    model_dir = ensure_smollm2() if args.model == "smollm2-135m" else Path(args.model)
    (b / "model").mkdir()
    for f in model_dir.iterdir():
        if f.is_file() and (f.suffix in (".json", ".jinja", ".txt", ".model") and f.name != "graft_conversion.json"):
            shutil.copy2(f, b / "model" / f.name)
    from importlib.metadata import version

    pins = {"a": [f"polars=={version('polars')}", f"polars-runtime-32=={version('polars-runtime-32')}"],
            "b": [f"marisa-trie=={version('marisa-trie')}"]}
    for name, reqs in pins.items():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_17_x86_64",
                        "--platform", "manylinux_2_28_x86_64", "-d", str(root / name), *reqs], check=True)
    for d in (a, b):
        total = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        print(f"{d}: {total / 2**20:.1f} MiB")
    return 0


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--index", required=True, help="An index with DocIDs (graft train INDEX, or --dry-run).")
    ap.add_argument("--model", default="smollm2-135m", help="smollm2-135m, tiny or a local model folder.")
    ap.add_argument("--random", action="store_true",
                    help="Random weights of the model's architecture (a local folder needs only config.json "
                         "and the tokenizer files).")
    ap.add_argument("--arch", choices=("base", "llama-3.2-1b"), default="base",
                    help="With --random: the base model's architecture, or Llama-3.2-1B's (hidden 2048, 16 "
                         "layers, vocabulary 128,256) over the base model's tokenizer.")
    ap.add_argument("--queries-file", default=None,
                    help="Query items as JSON ([[facet, text], ...] per query) instead of reading the index's "
                         "facets (which needs polars); write one with --dump-queries.")
    ap.add_argument("--dump-queries", default=None, help="Write the query items to this JSON file and exit.")
    ap.add_argument("--stage", default=None,
                    help="Stage a GPU run into this folder and exit (experiments/gpu/README.md, 'Query latency').")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--beams", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads.")
    add_results_argument(ap)
    ap.add_argument("--tag", default="", help="Suffix of the result files (e.g. _gpu).")
    ap.add_argument("--unshared", action="store_true", help="Also time graft without prompt sharing.")
    args = ap.parse_args(argv)

    import torch

    from graft.decoding import decode_items
    from graft.docids import check_tokenizer, load_tries
    from graft.facets import FACETS

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.stage:
        return stage(args)
    if args.dump_queries or not args.queries_file:
        from graft.index import Index

        idx = Index.open(args.index)
        queries = []
        for pid in idx.paper_ids[: args.queries]:
            facets = idx.paper_facets(pid)
            queries.append([(f, t) for f in FACETS for t in facets[f] if t.strip()])
        corpus_hash = idx.manifest.get("corpus_hash")
        if args.dump_queries:
            Path(args.dump_queries).write_text(json.dumps({"corpus_hash": corpus_hash, "queries": queries}))
            print(f"{len(queries)} queries -> {args.dump_queries}")
            return 0
    else:
        data = json.loads(Path(args.queries_file).read_text())
        queries = [[tuple(item) for item in q] for q in data["queries"]][: args.queries]
        corpus_hash = data.get("corpus_hash")
    model, tokenizer = _model(args)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    model = model.to(args.device, dtype=dtype).eval()
    tries = load_tries(args.index)
    check_tokenizer(args.index, json.loads((Path(args.index) / "docids" / "meta.json").read_text()), tokenizer)

    decoders = {"graft": lambda items: decode_items(model, tokenizer, tries, items, args.beams)}
    if args.unshared:
        decoders["graft_prompt_per_beam"] = lambda items: decode_items(model, tokenizer, tries, items, args.beams,
                                                                       share_prompt=False)
    decoders["baseline_prefix_allowed_tokens_fn"] = lambda items: baseline_decode(model, tokenizer, tries, items,
                                                                                  args.beams)
    for fn in decoders.values():  # warm-up
        fn(queries[0])
    times: dict[str, list[float]] = {name: [] for name in decoders}
    for items in queries:
        for name, fn in decoders.items():
            _sync(args.device)
            t0 = time.perf_counter()
            fn(items)
            _sync(args.device)
            times[name].append(time.perf_counter() - t0)

    def stats(ts: list[float]) -> dict[str, float]:
        return {"p50_s": float(np.percentile(ts, 50)), "p95_s": float(np.percentile(ts, 95)),
                "mean_s": float(np.mean(ts)), "per_query_s": [round(t, 4) for t in ts]}

    res = {
        "command": "python -m experiments.query_latency " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.platform(), "device": args.device,
        "torch_threads": torch.get_num_threads(), "model": args.model, "random_weights": args.random,
        "arch": args.arch, "dtype": str(dtype).removeprefix("torch."),
        "index": str(args.index), "corpus_hash": corpus_hash, "queries": len(queries),
        "beams": args.beams, "items_per_query_mean": float(np.mean([len(q) for q in queries])),
        **{name: stats(ts) for name, ts in times.items()},
    }
    res["speedup_p50"] = res["baseline_prefix_allowed_tokens_fn"]["p50_s"] / res["graft"]["p50_s"]
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"query_latency{args.tag}.json").write_text(json.dumps(res, indent=2) + "\n")
    labels = {"graft": "graft (one batched generate, TrieLogitsProcessor, prompt shared by the beams)",
              "graft_prompt_per_beam": "graft, prompt encoded per beam (plain generate prefill)",
              "baseline_prefix_allowed_tokens_fn": "baseline (generate + prefix_allowed_tokens_fn, per facet)"}
    base = res["baseline_prefix_allowed_tokens_fn"]["p50_s"]
    rows = "".join(f"| {labels[name]} | {res[name]['p50_s']:.3f} | {res[name]['p95_s']:.3f} | "
                   f"{res[name]['mean_s']:.3f} | {base / res[name]['p50_s']:.2f}x |\n" for name in decoders)
    md = (f"# Query latency ({args.model}, {args.device}, {args.beams} beams)\n\n"
          f"`{res['command']}` · {res['date']} · {len(queries)} queries, "
          f"{res['items_per_query_mean']:.1f} facet items each · {res['torch_threads']} torch threads · "
          f"corpus {res['corpus_hash']}\n\n"
          "| decoder | p50 s | p95 s | mean s | speed-up vs baseline (p50) |\n|---|---:|---:|---:|---:|\n"
          + rows + f"\nSpeed-up of graft at p50: {res['speedup_p50']:.2f}x\n")
    (out / f"query_latency{args.tag}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
