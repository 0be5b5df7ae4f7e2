"""``python -m assomem_gpu.finetune``: denoising multi-task LoRA fine-tuning of the answering LLM (§3.3) with trl's
``SFTTrainer`` and peft.

Rankings come from a ranking export (``--from-rankings``, as ``python -m assomem_gpu.eval --rankings`` writes) or from
retrieval with ``--method``. The questions are split by evidence (``finetune.samples.split_questions``): only the
train side is trained on, and no training context shows a held-out question's evidence. Written to ``--output``:
``adapter/`` (the LoRA weights), ``merged/`` (the model with them merged: answer with ``--llm hf:<output>/merged``),
``split.json`` (question ids of each side: ``python -m assomem_gpu.answer --questions <output>/split.json`` answers
the held-out side) and ``train.json`` (the loss log, the samples kept, the settings). Runs on the GPU when there is
one, else on the CPU, unchanged.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from ..cli_options import add_dataset_options, check_writable, dataset_from_options, dataset_record
from ..llm import TransformersLLM, make_llm
from ..ranking_source import add_rankings_options, rankings_from_options
from .samples import denoising_samples, split_questions


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m assomem_gpu.finetune", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_dataset_options(p, "a seeded random sample of this many questions",
                        "<format>:<path> of labelled questions with answers",
                        "seed of --limit, --haystack-sessions, the split, the samples and the training")
    p.add_argument("--model", default="smollm2", help="the LLM to tune: smollm2 or hf:<model>[::<gguf>]")
    p.add_argument("--output", required=True, help="folder for adapter/, merged/, split.json, train.json")
    p.add_argument("--heldout", type=float, default=0.2,
                   help="share of the questions (grouped by shared evidence) kept out of training")
    p.add_argument("--context", type=int, default=6, help="utterances in a sample's memory context")
    p.add_argument("--max-steps", type=int, default=60, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=4, help="samples per optimiser step (their gradients accumulated)")
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank (alpha is twice it)")
    p.add_argument("--max-length", type=int, default=2560,
                   help="tokens of a sample kept: six utterances cut at 1,500 characters and the instruction fit; a "
                        "longer sample is dropped whole (train.json counts those kept)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_rankings_options(p, "whose rankings give the hard negatives")
    args = p.parse_args(argv)
    for name in ("context", "max_steps", "batch_size", "lora_r", "max_length"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    try:
        check_writable(Path(args.output) / "train.json")
        llm = make_llm(args.model)
        if not isinstance(llm, TransformersLLM):
            raise ValueError(f"--model: only a local transformers model can be tuned, not {args.model!r}")
        ds = dataset_from_options(args)
        train, held = split_questions(ds, args.heldout, args.seed)
        rankings = rankings_from_options(args, ds, [args.context], progress=not args.quiet)
        samples = denoising_samples(ds, rankings, train, args.context, args.seed, unseen=held)
        if not samples:
            raise ValueError(f"{args.dataset}: no training sample (questions need answers, not rubrics, and evidence)")
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "split.json").write_text(json.dumps({"train": [ds.questions[i].id for i in train],
                                                "heldout": [ds.questions[i].id for i in held]}, indent=1) + "\n")
    try:
        log, kept = train_lora(llm, samples, out, args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if kept < len(samples):
        print(f"warning: {len(samples) - kept} of {len(samples)} samples were over --max-length {args.max_length} "
              "tokens and were dropped", file=sys.stderr)
    (out / "train.json").write_text(json.dumps({
        "model": llm.name, **dataset_record(args), "samples": len(samples), "samples_kept": kept,
        "train_questions": len(train),
        "heldout_questions": len(held), "settings": {k: getattr(args, k) for k in (
            "context", "max_steps", "batch_size", "learning_rate", "lora_r", "max_length", "seed", "heldout")},
        "log": log, "total_s": round(time.perf_counter() - t0, 1)}, indent=1) + "\n")
    print(f"wrote {out / 'adapter'}, {out / 'merged'}, {out / 'split.json'}, {out / 'train.json'}")
    return 0


def train_lora(llm: TransformersLLM, samples: list[dict], out: Path, args: argparse.Namespace
               ) -> tuple[list[dict], int]:
    """LoRA on every linear projection of ``llm``'s model, trained on the samples' completions; saves ``adapter/``
    and ``merged/`` under ``out``; returns the trainer's log (loss per logging step) and the samples it kept (those
    of at most ``max_length`` tokens, prompt and target)."""
    import torch
    from datasets import Dataset as HFDataset
    from peft import LoraConfig
    from transformers.utils import logging
    from trl import SFTConfig, SFTTrainer

    tokenizer, model = TransformersLLM(llm.model_ref, llm.gguf_file).load()  # a copy: peft changes it in place
    if llm.gguf_file:  # transformers de-quantizes a GGUF file to float32 as it loads and keeps only the tag, which
        model.hf_quantizer, model.is_quantized = None, False  # the trainer would refuse to train
        del model.config.quantization_config
    tokenizer.padding_side = "right"  # training pads on the right; generation (TransformersLLM) on the left
    lora = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.05, target_modules="all-linear",
                      task_type="CAUSAL_LM")
    fit = [s for s in samples  # whole, as trl tokenizes them: a sample cut at max_length would train on part of
           # its target (trl drops only one whose target is cut away entirely)
           if len(tokenizer.apply_chat_template(s["prompt"] + s["completion"], tokenize=True, return_dict=True)
                  ["input_ids"]) <= args.max_length]
    if not fit:
        raise ValueError(f"--max-length: every sample is longer than {args.max_length} tokens")
    data = HFDataset.from_list([{"prompt": s["prompt"], "completion": s["completion"]} for s in fit])
    if args.quiet:
        logging.set_verbosity_error()
    with tempfile.TemporaryDirectory(prefix="assomem-finetune-") as scratch:  # the trainer's output_dir: it saves
        # nothing there (save_strategy "no"), but makes it. One sample at a time, its gradients accumulated over
        # the batch, its activations recomputed in the backward pass: four 2,560-token samples at once, activations
        # kept, took over 24 GB and were killed
        config = SFTConfig(output_dir=scratch, max_steps=args.max_steps, per_device_train_batch_size=1,
                           gradient_accumulation_steps=args.batch_size, activation_checkpointing=True,
                           learning_rate=args.learning_rate, max_length=args.max_length,
                           logging_steps=max(1, args.max_steps // 20), save_strategy="no", report_to="none",
                           seed=args.seed, use_cpu=not torch.cuda.is_available(), disable_tqdm=args.quiet)
        trainer = SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer,
                             peft_config=lora)
        trainer.train()
    trainer.model.save_pretrained(out / "adapter")
    merged = trainer.model.merge_and_unload()
    merged.save_pretrained(out / "merged")
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(out / "merged")
    log = [row for row in trainer.state.log_history if "loss" in row or "train_loss" in row]
    return log, len(trainer.train_dataset)


if __name__ == "__main__":
    sys.exit(main())
