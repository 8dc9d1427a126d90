"""Corpus loading, facet extraction, embeddings, citation signals and typed top-K graph construction."""
