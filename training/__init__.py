"""Distillation data, tokenisation and the trainer for the generative retriever."""
