"""Answers from retrieved memories: the paper's generation and judge prompts, answer scores, and the answer CLI."""
