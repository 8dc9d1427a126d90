"""The settings of `graft build`, recorded in an index's manifest: what the build used, and what a
query outside the corpus must use again to be scored as corpus papers were (`graft.external`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graft.ann import CANDIDATE_METHODS, FAISS_MIN_PAPERS, FAISS_NPROBE, HNSW_EF_SEARCH, CandidateSearch
from graft.citations import CITATION_PARTNERS, RESCALE_MODES, TEXT_NEIGHBOURS
from graft.config import config_from_dict, type_problems
from graft.edges import LINKED_CANDIDATES, GraphParams
from graft.encoder import BACKENDS, DEFAULT_ITEM_CONTEXT, DEFAULT_TITLE_WEIGHT, ITEM_CONTEXTS
from graft.errors import ConfigError
from graft.extract import EXTRACTORS, SCORERS, HeuristicConfig
from graft.lexical import LEXICAL_WEIGHT, TEXT_LEXICAL_WEIGHT

#: Largest title weight a build takes: past it an item's vector is its title's (and float32 overflows far beyond).
MAX_TITLE_WEIGHT = 100.0

@dataclass
class BuildConfig:
    """Settings of `graft build`, recorded in manifest.json."""

    extractor: str = "heuristic"  # facet extractor: "heuristic" (offline default) or "llm"
    # how the offline extractor scores sentences: "learned" (the ACLSum-trained facet classifier, one
    # facet per sentence) or "rules" (hand-set weights; indexes built before the classifier)
    facet_scorer: str = "learned"
    embedding_model: str | None = None  # local sentence-transformers folder; None = all-MiniLM-L6-v2
    embedding_batch_size: int | None = None  # texts per encoder batch; None: 16 on the CPU, 128 on a GPU
    embedding_device: str = "cpu"  # torch device of the build's encoder: cpu, cuda, cuda:N, mps or auto
    embedding_backend: str = "auto"  # encoder runtime: "auto" (ONNX Runtime on the CPU: cs768 in 0.63x), "torch", "onnx"
    embedding_dtype: str = "float16"  # dtype of embeddings/items.npy ("float16" halves the file)
    title_weight: float = DEFAULT_TITLE_WEIGHT  # item vector = unit(e(item) + w·e(title)); 0 = the item alone
    # what an item's vector reads besides its own text: "title" (unit(e(item) + w·e(title)) above) or
    # "late" (its tokens read inside the whole title + abstract, one encoder pass a paper, then the
    # title mixed in at w; an item not found in the text keeps the "title" form; graft.encoder.ContextReader)
    item_context: str = DEFAULT_ITEM_CONTEXT
    paper_embeddings: bool = True  # write embeddings/papers.npy (title + abstract; text coupling, dense baseline)
    top_k: int = 20  # K: out-edges kept per paper and facet (GRAFT paper)
    alpha: float = 0.75  # facet-similarity weight in w_f (GRAFT paper)
    beta: float = 0.25  # citation-score weight in w_f (GRAFT paper)
    n_candidates: int = 100  # facet-similar candidates per paper from the pooled prefilter
    citation_rescale: str = "pair"  # "pair": per-pair rescaling of log counts (README); "global": by the max
    # coupled and co-cited partners a paper keeps, the most counted of each (graft.citations); 0 = all
    citation_partners: int = CITATION_PARTNERS
    block_rows: int | None = None  # prefilter rows per block; None sizes blocks to ~128 MiB
    # the prefilter of the n_candidates: "exact" (blocked brute force, n^2 d), "faiss" (an IVF-Flat index,
    # 2 sqrt(n) lists, faiss_nprobe searched; graft.ann), "hnsw" (an HNSW graph, hnsw_ef entries kept while
    # searching; queries from outside the corpus search an IVF index), "auto": hnsw from faiss_min_papers on
    candidates: str = "auto"
    faiss_min_papers: int = FAISS_MIN_PAPERS  # papers; below it "auto" is exact, from it hnsw (docs/scale.md)
    faiss_nprobe: int = FAISS_NPROBE  # IVF lists searched per paper (16: 0.97 of the exact top 20, graph_scale.md)
    hnsw_ef: int = HNSW_EF_SEARCH  # HNSW entries kept while searching (docs/results/ann_growth_1e6.md)
    # direct citation links (either way) as graph candidates; off = the reference design: candidates
    # are facet-similar, coupled and co-cited papers, and a direct link is left to be found (the gold)
    direct_links: bool = False
    # coupled or co-cited papers scored as candidates per paper, the strongest by citation score; 0 = all
    # (their number grows with the corpus: docs/scale.md)
    linked_candidates: int = LINKED_CANDIDATES
    # M: a paper with no citation link in the corpus takes the clipped title + abstract cosine of its
    # M nearest papers as the citation half of its edge weights (graph/text.npz); 0 = that half stays 0
    text_coupling: int = TEXT_NEIGHBOURS
    # λ: share of the lexical cosine (TF-IDF of a paper's title and items of the facet, graft.lexical) in
    # facet similarity, s_f = (1 - λ) dense + λ lexical; 0 = the items' embeddings alone
    lexical_weight: float = LEXICAL_WEIGHT
    # μ: share of the lexical cosine of title + abstract in text coupling's similarity; 0 = the embeddings alone
    text_lexical_weight: float = TEXT_LEXICAL_WEIGHT
    skip_bad: bool = False  # skip invalid corpus records (counted and listed) instead of stopping
    limit: int | None = None  # keep only the first N valid records
    llm: dict[str, Any] = field(default_factory=dict)  # LLMConfig fields for extractor="llm"

    def __post_init__(self) -> None:
        problems = type_problems(self)  # top_k 2.5 kept 3 edges; a string weight failed deep in the build
        if problems:
            raise ConfigError("invalid build settings: " + "; ".join(problems))
        wrong = [f"{name}={getattr(self, name)!r}" for name in ("top_k", "n_candidates", "embedding_batch_size",
                                                               "block_rows", "limit")
                 if getattr(self, name) is not None and getattr(self, name) < 1]
        if wrong:
            raise ConfigError(f"{', '.join(wrong)}: must be >= 1 (batch size, block rows and limit: or None)")
        if self.linked_candidates < 0:
            raise ConfigError(f"linked_candidates must be >= 0 (0 = all), got {self.linked_candidates}")
        if self.citation_partners < 0:
            raise ConfigError(f"citation_partners must be >= 0 (0 = all), got {self.citation_partners}")
        if self.text_coupling < 0:
            raise ConfigError(f"text_coupling must be >= 0 (0 = off), got {self.text_coupling}")
        if self.text_coupling and not self.paper_embeddings:
            raise ConfigError("text_coupling needs paper_embeddings (the title + abstract vectors it compares); "
                             "set text_coupling to 0 to build without them")
        for name in ("lexical_weight", "text_lexical_weight"):
            if not 0 <= getattr(self, name) <= 1:  # NaN too
                raise ConfigError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.extractor not in EXTRACTORS:
            raise ConfigError(f"extractor '{self.extractor}' is unknown; allowed: {', '.join(EXTRACTORS)}")
        if self.facet_scorer not in SCORERS:
            raise ConfigError(f"facet_scorer '{self.facet_scorer}' is unknown; allowed: {', '.join(SCORERS)}")
        if self.embedding_dtype not in ("float16", "float32"):
            raise ConfigError(f"embedding_dtype '{self.embedding_dtype}'; allowed: float16, float32")
        if not 0 <= self.title_weight <= MAX_TITLE_WEIGHT:  # NaN and infinity too: they empty every graph
            raise ConfigError(f"title_weight must lie in [0, {MAX_TITLE_WEIGHT:g}], got {self.title_weight} (beyond "
                             f"that an item's own text no longer counts)")
        if self.item_context not in ITEM_CONTEXTS:
            raise ConfigError(f"item_context '{self.item_context}' is unknown; allowed: {', '.join(ITEM_CONTEXTS)}")
        if self.candidates not in CANDIDATE_METHODS:
            raise ConfigError(f"candidates '{self.candidates}' is unknown; allowed: {', '.join(CANDIDATE_METHODS)}")
        if self.faiss_min_papers < 1 or self.faiss_nprobe < 1 or self.hnsw_ef < 1:
            raise ConfigError(f"faiss_min_papers={self.faiss_min_papers}, faiss_nprobe={self.faiss_nprobe}, "
                              f"hnsw_ef={self.hnsw_ef}: must be >= 1")
        if self.citation_rescale not in RESCALE_MODES:
            raise ConfigError(f"citation_rescale '{self.citation_rescale}' is unknown; allowed: {', '.join(RESCALE_MODES)}")
        if self.embedding_backend not in BACKENDS:
            raise ConfigError(f"embedding_backend (--encoder-backend) '{self.embedding_backend}' is unknown; "
                             f"allowed: {', '.join(BACKENDS)}")
        if not (self.alpha >= 0 and self.beta >= 0 and abs(self.alpha + self.beta - 1) < 1e-6):
            raise ConfigError(f"alpha and beta must be >= 0 and sum to 1, got {self.alpha} + {self.beta}")
        if self.extractor == "llm":  # a bad server URL or setting before any work, not after loading models
            from graft.llm import LLMConfig

            LLMConfig.from_dict(dict(self.llm))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BuildConfig:
        # indexes built before items took their title as context embedded them alone, and those
        # built before direct links became optional took them as candidates
        # and those built before link-less papers were text-coupled left their citation half empty
        # and those built before the facet classifier scored sentences with the hand-set rules
        # and those built before approximate candidates searched exactly
        # and those built before the linked candidates were capped scored all of them
        # and those built before the citation partners were capped counted all of them
        # and those built before items were read in context embedded them with their title alone
        # and those built before lexical similarity compared embeddings alone
        return config_from_dict(cls, {"title_weight": 0.0, "direct_links": True, "text_coupling": 0,
                                      "facet_scorer": "rules", "candidates": "exact", "item_context": "title",
                                      "linked_candidates": 0, "citation_partners": 0,
                                      "lexical_weight": 0.0, "text_lexical_weight": 0.0,
                                      **data})

    def heuristic_config(self) -> HeuristicConfig:
        """The offline extractor's settings this build uses (also for records outside the corpus)."""
        return HeuristicConfig(scorer=self.facet_scorer)

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> BuildConfig:
        """The build settings recorded in an index's manifest (defaults where none are recorded)."""
        return cls.from_dict(manifest.get("stages", {}).get("build", {}).get("config", {}))

    def graph_params(self) -> GraphParams:
        return GraphParams(top_k=self.top_k, alpha=self.alpha, beta=self.beta,
                           n_candidates=self.n_candidates, block_rows=self.block_rows,
                           direct_links=self.direct_links, linked_candidates=self.linked_candidates,
                           candidates=CandidateSearch(self.candidates, self.faiss_min_papers, self.faiss_nprobe,
                                                      hnsw_ef=self.hnsw_ef),
                           lexical_weight=self.lexical_weight)

    @property
    def lexical(self) -> bool:
        """Whether the build fits a lexicon and stores lexical rows (`graft.lexical`): a lexical
        weight above 0, for the facets or (with text coupling on) for text coupling."""
        return self.lexical_weight > 0 or (self.text_lexical_weight > 0 and self.text_coupling > 0)
