"""Per-query latency of the generative retriever's decoding, against plain HF constrained generation.

For each query paper (the first N papers of an index with DocIDs), all of its facet items are
decoded with the same model, tries and beams, two ways, in the same run:

- graft: `graft.decoding.decode_items` — every item of the four facets in one batched `generate`
  call, masked by `TrieLogitsProcessor` (vectorised scatter of the allowed ids, prefix cache);
- baseline: plain `generate(..., prefix_allowed_tokens_fn=...)` over the trie, one call per facet
  (that facet's items batched), as a straightforward implementation would do it.

Reports p50/p95 per query (seconds) and writes eval/results/query_latency.{md,json}. Weights can
be random (`--random`): only speed is measured.

    python -m eval.benchmarks.query_latency --index INDEX [--model smollm2-135m|tiny|PATH]
        [--queries 50] [--beams 20] [--device cpu|cuda] [--random]
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

REPO = Path(__file__).resolve().parents[2]


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


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, help="An index with DocIDs (graft train INDEX, or --dry-run).")
    ap.add_argument("--model", default="smollm2-135m", help="smollm2-135m, tiny or a local model folder.")
    ap.add_argument("--random", action="store_true", help="Random weights of the model's architecture.")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--beams", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads.")
    ap.add_argument("--results", default=str(REPO / "eval" / "results"))
    ap.add_argument("--tag", default="", help="Suffix of the result files (e.g. _gpu).")
    args = ap.parse_args(argv)

    import torch

    from graft.decoding import decode_items
    from graft.docids import load_docids, load_tries
    from graft.facets import FACETS
    from graft.index import Index
    from training.base_models import random_model, resolve_base_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = resolve_base_model(args.model)
    if args.random:
        model = random_model(model.config, seed=0)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    model = model.to(args.device, dtype=dtype).eval()
    idx = Index.open(args.index)
    load_docids(idx.path, tokenizer)  # refuses DocIDs of another tokenizer
    tries = load_tries(idx.path)
    queries = []
    for pid in idx.paper_ids[: args.queries]:
        facets = idx.paper_facets(pid)
        queries.append([(f, t) for f in FACETS for t in facets[f] if t.strip()])

    def timed(fn) -> list[float]:
        fn(queries[0])  # warm-up
        out = []
        for items in queries:
            _sync(args.device)
            t0 = time.perf_counter()
            fn(items)
            _sync(args.device)
            out.append(time.perf_counter() - t0)
        return out

    graft_t = timed(lambda items: decode_items(model, tokenizer, tries, items, args.beams))
    base_t = timed(lambda items: baseline_decode(model, tokenizer, tries, items, args.beams))

    def stats(ts: list[float]) -> dict[str, float]:
        return {"p50_s": float(np.percentile(ts, 50)), "p95_s": float(np.percentile(ts, 95)),
                "mean_s": float(np.mean(ts)), "per_query_s": [round(t, 4) for t in ts]}

    res = {
        "command": "python -m eval.benchmarks.query_latency " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.platform(), "device": args.device,
        "torch_threads": torch.get_num_threads(), "model": args.model, "random_weights": args.random,
        "index": str(idx.path), "corpus_hash": idx.manifest.get("corpus_hash"), "queries": len(queries),
        "beams": args.beams, "items_per_query_mean": float(np.mean([len(q) for q in queries])),
        "graft": stats(graft_t), "baseline_prefix_allowed_tokens_fn": stats(base_t),
    }
    res["speedup_p50"] = res["baseline_prefix_allowed_tokens_fn"]["p50_s"] / res["graft"]["p50_s"]
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"query_latency{args.tag}.json").write_text(json.dumps(res, indent=2) + "\n")
    g, b = res["graft"], res["baseline_prefix_allowed_tokens_fn"]
    md = (f"# Query latency ({args.model}, {args.device}, {args.beams} beams)\n\n"
          f"`{res['command']}` · {res['date']} · {len(queries)} queries, "
          f"{res['items_per_query_mean']:.1f} facet items each · corpus {res['corpus_hash']}\n\n"
          "| decoder | p50 s | p95 s | mean s |\n|---|---:|---:|---:|\n"
          f"| graft (one batched generate, TrieLogitsProcessor) | {g['p50_s']:.3f} | {g['p95_s']:.3f} | "
          f"{g['mean_s']:.3f} |\n"
          f"| baseline (generate + prefix_allowed_tokens_fn, per facet) | {b['p50_s']:.3f} | {b['p95_s']:.3f} | "
          f"{b['mean_s']:.3f} |\n\n"
          f"Speed-up at p50: {res['speedup_p50']:.2f}x\n")
    (out / f"query_latency{args.tag}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
