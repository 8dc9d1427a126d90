"""A facet sentence classifier learned from ACLSum: three logistic regressions over a sentence's features.

For every candidate sentence the classifier gives the probability that an ACLSum annotator would
highlight it for challenge (our Problem), approach (Method) and outcome (Result). Features:

- the sentence's embedding by the packaged MiniLM encoder (384 numbers);
- its place: relative position in its section, its square, first / last flags, log of the section's
  sentence count, and the section (abstract, introduction, conclusion) one-hot;
- the four cue-phrase signals of `graft.extract.cue_scores` (1 - 0.5^hits per facet, -1 on boilerplate).

The weights are `facet_classifier.json` next to this module: plain numbers (no pickle), with the
encoder they belong to, the training data and the regularisation chosen on ACLSum's validation split.
`python -m experiments.train_facet_classifier` re-makes the file from the `aclsum` package.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graft.errors import ConfigError, GraftError

#: The facets the classifier scores, in column order (Contribution has no gold in ACLSum).
LABELS: tuple[str, ...] = ("problem", "method", "result")
SECTIONS: tuple[str, ...] = ("abstract", "intro", "conclusion")
#: The weights shipped with the package.
WEIGHTS = Path(__file__).with_name("facet_classifier.json")
#: Names of the non-embedding features, in column order after the embedding.
EXTRA_FEATURES: tuple[str, ...] = (
    "position", "position^2", "first", "last", "log_sentences",
    *(f"section_{s}" for s in SECTIONS),
    "cue_problem", "cue_method", "cue_result", "cue_contribution",
)


def place_features(sources: list[str]) -> np.ndarray:
    """(n, 8) position and section features of a paper's candidates, given each one's section.

    Sentences of one section are numbered in order; a section's relative positions run 0..1.
    """
    out = np.zeros((len(sources), 8))
    for sec in dict.fromkeys(sources):
        rows = [i for i, s in enumerate(sources) if s == sec]
        if sec not in SECTIONS:
            raise GraftError(f"candidate section '{sec}' is unknown; allowed: {', '.join(SECTIONS)}")
        n = len(rows)
        rel = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(n)
        out[rows, 0] = rel
        out[rows, 1] = rel**2
        out[rows, 2] = 0.0
        out[rows[0], 2] = 1.0
        out[rows[-1], 3] = 1.0
        out[rows, 4] = np.log(n)
        out[rows, 5 + SECTIONS.index(sec)] = 1.0
    return out


def features(embeddings: np.ndarray, sources: list[str], cue: np.ndarray) -> np.ndarray:
    """The classifier's input rows for one paper's candidates.

    Args:
        embeddings: (n, dim) unit sentence vectors of the classifier's encoder.
        sources: each candidate's section (abstract / intro / conclusion), in candidate order.
        cue: (n, 4) cue signals (`graft.extract.cue_scores`).
    """
    return np.hstack([np.asarray(embeddings, dtype=np.float64), place_features(sources),
                      np.asarray(cue, dtype=np.float64)])


@dataclass(frozen=True)
class FacetClassifier:
    """Three one-vs-rest logistic regressions (Problem, Method, Result) over `features`."""

    coef: np.ndarray  # (3, dim + len(EXTRA_FEATURES))
    intercept: np.ndarray  # (3,)
    encoder: str  # the encoder whose embeddings the weights read
    dim: int
    meta: dict

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """(n, 3) probabilities of Problem / Method / Result for feature rows `x`."""
        if x.shape[1] != self.coef.shape[1]:
            raise GraftError(f"facet classifier: {x.shape[1]} features, the weights expect {self.coef.shape[1]}")
        return 1.0 / (1.0 + np.exp(-(x @ self.coef.T + self.intercept)))

    def check_encoder(self, name: str | None, dim: int) -> None:
        """Refuse an encoder other than the one the weights were trained on."""
        if dim != self.dim or (name is not None and name != self.encoder):
            raise ConfigError(
                f"the learned facet scorer reads {self.encoder} embeddings (dim {self.dim}), the build's encoder "
                f"is {name} (dim {dim}); build with facet_scorer='rules' (`graft build --facet-scorer rules`)"
            )

    def to_json(self) -> dict:
        return {"format": "graft-facet-classifier/1", "labels": list(LABELS), "encoder": self.encoder,
                "dim": self.dim, "extra_features": list(EXTRA_FEATURES),
                "coef": np.round(self.coef, 6).tolist(), "intercept": np.round(self.intercept, 6).tolist(),
                "meta": self.meta}

    def save(self, path: Path = WEIGHTS) -> None:
        path.write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: dict, *, where: str = "facet classifier") -> FacetClassifier:
        if data.get("format") != "graft-facet-classifier/1" or tuple(data.get("labels", ())) != LABELS:
            raise GraftError(f"{where}: not a graft-facet-classifier/1 file for labels {LABELS}")
        if tuple(data.get("extra_features", ())) != EXTRA_FEATURES:
            raise GraftError(f"{where}: its features {data.get('extra_features')} are not this version's "
                             f"{list(EXTRA_FEATURES)}; re-make it with `python -m experiments.train_facet_classifier`")
        coef = np.asarray(data["coef"], dtype=np.float64)
        intercept = np.asarray(data["intercept"], dtype=np.float64)
        if coef.shape != (len(LABELS), int(data["dim"]) + len(EXTRA_FEATURES)) or intercept.shape != (len(LABELS),):
            raise GraftError(f"{where}: weights of shape {coef.shape} / {intercept.shape} do not fit dim {data['dim']}")
        return cls(coef, intercept, str(data["encoder"]), int(data["dim"]), dict(data.get("meta", {})))

    @classmethod
    def load(cls, path: Path = WEIGHTS) -> FacetClassifier:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise GraftError(f"facet classifier weights {path}: {exc}; reinstall graft or re-make them with "
                             "`python -m experiments.train_facet_classifier`") from exc
        return cls.from_json(data, where=str(path))


@functools.cache
def packaged() -> FacetClassifier:
    """The classifier shipped with the package (loaded once)."""
    return FacetClassifier.load()
