"""Denoising multi-task fine-tuning of the answering LLM (the paper's §3.3): the dataset, and the LoRA run."""
