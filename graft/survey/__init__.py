"""The survey writer: topic -> facet-attributed retrieval -> outline -> cited, verified survey.

Each step is its own module and can be used alone:
`expand` (topic descriptions), `retrieve` (graph teacher / GRAFT / dense), `rerank` (two-stage
fusion rerank), `outline` (level-1 and level-2 headings), `write` (cited sentences), `verify`
(adaptive citation verification), `output` (survey.md, references.bib, survey.json), and
`pipeline.write_survey`, which runs them in order. `backends` holds the offline extractive writer
and the LLM backends (OpenAI-compatible HTTP, local transformers).
"""

from __future__ import annotations

from graft.survey.config import SurveyConfig, SurveyError

__all__ = ["SurveyConfig", "SurveyError"]
