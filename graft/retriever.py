"""The generative retriever: trie-constrained decoding per facet item, fused by graph-weighted RRF.

A query paper's facet items (all four facets) are decoded in batched `generate` calls
(`graft.decoding.decode_items`); each facet's DocIDs map back to papers, whose per-facet scores
are the summed beam probabilities over the query's items of that facet. The four ranked lists are
fused by `graft.fusion.graph_rrf` (or plain `rrf` for comparison).

Support w_f(q, c), the weight of graph-RRF's terms:

- **in-corpus query** (a paper of the index): the query-candidate edge weight of the facet graph,
  symmetrised as the teacher walks it, max(W_f, W_f^T)[q, c]; the query paper itself is never a
  candidate.
- **query outside the corpus** (given as facet items): it has no row in the graph, so support is
  estimated by *mutual corroboration*: for a candidate c retrieved in facet f,
  w_f(q, c) = max over the other candidates c' retrieved in facet f of max(W_f, W_f^T)[c, c'],
  i.e. the strongest facet-f edge from c to another paper the model also judged f-related to the
  query. A candidate that no other candidate of the list corroborates gets w = 0 and drops out of
  that facet, as an in-corpus candidate without an edge to the query does.

Fusions (`graft.fusion.FUSIONS`): `graph-rrf` (above), `rrf` (plain, for comparison) and `graph-walk`: the
candidates graph-RRF keeps, with their support weights, taken as the query's facet rows and walked
by the graph teacher (two hops over the symmetrised graphs, RRF over facets). Graph-RRF can return
only candidates with a direct edge to the query; the walk also reaches their neighbours, and its
evidence says which (one hop: a decoded candidate; two hops: through one, named in `via`).

With `citation_weight` W > 0 every fusion gets the citation channel (`graft.fusion.cited_with`): a
fifth run of the papers that cite or are cited by the first R results of the facet fusion, weighted W
(in graph-RRF each of its papers is supported by W x the share of the first results it is linked to).
Its hits carry citation evidence (`Hit.citation`), never a facet credit.

A query outside the corpus given with its text may bring its nearest corpus papers by title +
abstract (`neighbours`, `graft.external.text_coupling_row`): they join the fusion as the text
channel (`graft.fusion.text_run`), a run of weight W_t in which graph-RRF supports each by W_t x its
cosine, fused before the citation channel is made. It stands in for the query's citation links,
which a new paper lacks, as text coupling does in the teacher's rows; its hits carry text evidence
(`Hit.text`), never a facet credit. In graph-walk the neighbours join every facet row at beta x
cosine, as in the teacher's rows.

The query path needs the model, the tries, the DocID table, the sparse graphs and the citation links
only: no sentence encoder and no nearest-neighbour index (a text query's facet items and neighbours
are found by the caller, `graft.external`).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graft.candidates import CandidateFusion
from graft.decoding import decode_items, facet_candidates
from graft.devices import resolve_device
from graft.docids import DocidTable, DocidTrie, load_docids, load_tries
from graft.errors import ConfigError, GraftError, IndexFormatError
from graft.facets import FACETS
from graft.fusion import CITATION_WEIGHT, RRF_K, TEXT_WEIGHT
from graft.manifest import MODEL_DONE
from graft.progress import hf_progress_bars
from graft.results import QueryResult

if TYPE_CHECKING:
    from graft.index import Index


class GenerativeRetriever(CandidateFusion):
    """Facet-attributed retrieval with a trained DocID model.

    Args:
        index: the opened index (its sparse facet graphs and paper table).
        model: a causal LM, or the folder it was saved to (`INDEX/model`).
        tokenizer: the model's tokenizer (loaded from the model folder when None).
        tries: facet -> DocID trie (loaded from the index when None).
        docids: the DocID table (loaded from the index when None).
        device: where the model runs ("cpu" by default; "auto" or a name `graft.devices.resolve_device`
            checks).
    """

    def __init__(self, index: Index, model: Any, tokenizer: Any = None, tries: dict[str, DocidTrie] | None = None,
                 docids: DocidTable | None = None, *, device: str = "cpu") -> None:
        device = resolve_device(device)  # before the model is read
        if isinstance(model, (str, Path)):
            model, tokenizer = _load_model(Path(model), tokenizer)
        if tokenizer is None:
            raise ConfigError("pass the tokenizer with an in-memory model")
        super().__init__(index)
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.tries = tries if tries is not None else load_tries(index.path)
        self.docids = docids if docids is not None else load_docids(index.path, tokenizer)

    @cached_property
    def _papers_of(self) -> dict[tuple[str, int], list[str]]:
        d = self.docids.docids
        return {(f, int(i)): list(p) for f, i, p in zip(d["facet"].to_list(), d["docid_id"].to_list(),
                                                        d["paper_ids"].to_list())}

    def papers_of(self, facet: str, docid_id: int) -> list[str]:
        """The papers a DocID maps to."""
        return self._papers_of.get((facet, int(docid_id)), [])

    # ---- queries ---------------------------------------------------------------------------
    def query_paper(self, paper_id: str, k: int = 20, beams: int = 20, fusion: str = "graph-rrf",
                    *, rrf_k: int = RRF_K, citation_weight: float = CITATION_WEIGHT, **channel: int) -> QueryResult:
        """Related papers of a corpus paper.

        Args:
            paper_id: a paper of the index; its own facet items are the queries.
            k: results returned.
            beams: beams per facet item.
            fusion: `graph-rrf` (support = the query's edges), `rrf` or `graph-walk`.
            rrf_k: the RRF constant.
            citation_weight: W of the citation channel (0 = off).
            channel: citation_first, citation_depth, citation_keep (`CandidateFusion._fuse`).
        Returns:
            the ranked, facet-attributed result; `info` has the per-facet candidate counts and, for
            graph-rrf, `dropped` (count) and `dropped_ids`.
        Raises:
            GraftError: unknown paper id or fusion.
        """
        self.index.row(paper_id)
        lists = self.facet_lists([(self.index.paper_facets(paper_id), {paper_id})], beams)[0]
        return self.fuse_paper(paper_id, lists, k=k, fusion=fusion, rrf_k=rrf_k, citation_weight=citation_weight,
                               **channel)

    def query_items(self, facets: dict[str, list[str]], k: int = 20, beams: int = 20, fusion: str = "graph-rrf",
                    *, query_id: str = "query", rrf_k: int = RRF_K,
                    citation_weight: float = CITATION_WEIGHT, neighbours: dict[str, float] | None = None,
                    text_weight: float = TEXT_WEIGHT, exclude: set[str] | None = None, **channel: int) -> QueryResult:
        """Related papers of a paper outside the corpus, given its facet items.

        Support is estimated by mutual corroboration among the retrieved candidates (module
        docstring). `neighbours` (paper id -> cosine): the query's nearest papers by title +
        abstract, for the text channel at W_t = `text_weight` (`CandidateFusion.fuse_items`).
        `exclude`: paper ids never returned. Args and Returns otherwise as `query_paper`.
        """
        lists = self.facet_lists([(facets, set(exclude or ()))], beams)[0]
        return self.fuse_items(query_id, lists, k=k, fusion=fusion, rrf_k=rrf_k, citation_weight=citation_weight,
                               neighbours=neighbours, text_weight=text_weight, exclude=exclude, **channel)

    def facet_lists(self, queries: list[tuple[dict[str, list[str]], set[str]]], beams: int, *,
                    batch_size: int = 64) -> list[dict[str, dict[str, float]]]:
        """Per query, facet -> candidate paper -> summed beam probability, with the facet items of
        all the queries decoded together in `generate` calls of `batch_size` items.

        Args:
            queries: per query, its facet items and the paper ids it must not return (the query
                paper itself in corpus).
            beams: beams per facet item.
            batch_size: items per `generate` call (a query's items may share a call with another's).
        Returns:
            one facet -> {paper id: score} mapping per query, in order (`fuse_paper` / `fuse_items`
            rank and fuse it).
        """
        per_query = [[(f, t) for f in FACETS for t in facets.get(f, []) if f in self.tries and t.strip()]
                     for facets, _ in queries]
        flat = [item for items in per_query for item in items]
        decoded = decode_items(self.model, self.tokenizer, self.tries, flat, beams, batch_size=batch_size)
        out, at = [], 0
        for items, (_, exclude) in zip(per_query, queries):
            out.append(facet_candidates(items, decoded[at : at + len(items)], self.papers_of, exclude))
            at += len(items)
        return out

def _load_model(folder: Path, tokenizer: Any = None) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "config.json").is_file():
        raise GraftError(f"no trained model in '{folder}'; train one with `graft train {folder.parent}` "
                         f"or use --retriever teacher")
    if not (folder / MODEL_DONE).is_file():
        raise GraftError(f"the model in '{folder}' is unfinished (its training stopped before the final save); "
                         f"`graft train {folder.parent}` resumes it, or use --retriever teacher")
    try:
        with hf_progress_bars(False):
            model = AutoModelForCausalLM.from_pretrained(folder)
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as exc:  # transformers and safetensors raise several types for a damaged file
        raise IndexFormatError(f"the trained model in '{folder}' cannot be loaded ({type(exc).__name__}: {exc}); "
                               f"the files are damaged: train it again with `graft train {folder.parent}`, "
                               "or use --retriever teacher") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def load_retriever(index: Index, *, device: str = "cpu") -> GenerativeRetriever:
    """Open an opened index's generative retriever (`Index.generative` keeps one per device):
    `INDEX/model`, the tries and the DocID table.

    Raises:
        IndexFormatError: DocIDs missing / made with another tokenizer.
        GraftError: no trained model in the index.
    """
    return GenerativeRetriever(index, index.path / "model", device=device)
