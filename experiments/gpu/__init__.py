"""The GPU run of the generative retriever (README.md here says how to stage and run it)."""
