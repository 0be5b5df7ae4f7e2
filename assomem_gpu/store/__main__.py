"""``python -m assomem_gpu.store``: import a dataset into a tenant, export a tenant as JSON Lines, print statistics.

    python -m assomem_gpu.store import --data DIR --tenant NAME --dataset meetingqa:path/to/file.json [--limit N]
    python -m assomem_gpu.store export --data DIR --tenant NAME [--output FILE.jsonl]   (default: standard output)
    python -m assomem_gpu.store stats --data DIR
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from ..cli_options import add_store_config_options, store_config
from ..encode import ENCODER_HELP, add_prompt_options

CHUNK = 200  # sessions per transaction on import


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m assomem_gpu.store", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True)
    for name in ("import", "export", "stats"):
        v = verbs.add_parser(name)
        v.add_argument("--data", required=True, help="the store's directory")
        v.add_argument("--encoder", default="all-MiniLM-L6-v2", help=f"the store's encoder: {ENCODER_HELP}")
        add_prompt_options(v)
        add_store_config_options(v)
        if name != "stats":
            v.add_argument("--tenant", required=True)
    verbs.choices["import"].add_argument("--dataset", required=True, help="<format>:<path>, any loader format")
    verbs.choices["import"].add_argument("--limit", type=int, help="at most this many sessions")
    verbs.choices["import"].add_argument("--undated", action="store_true", help="the store takes undated sessions")
    verbs.choices["export"].add_argument("--output", help="JSON Lines file (default: standard output)")
    args = p.parse_args(argv)

    from ..encode import make_encoder, prompt_options
    from . import MemoryStore, StoreError

    try:
        encoder = make_encoder(args.encoder, cache=False, prompts=prompt_options(args))
        store = MemoryStore(args.data, encoder, store_config(args), device="cpu",
                            dated=not getattr(args, "undated", False))
    except (StoreError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with store:
        try:
            return {"import": _import, "export": _export, "stats": _stats}[args.verb](store, args)
        except (KeyError, ValueError, TypeError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2


def _import(store, args) -> int:
    from ..data import load_dataset

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit: at least 1 session, got {args.limit}")
    ds = load_dataset(args.dataset)
    bank = ds.bank
    held = set(store.session_ids(args.tenant)) if args.tenant in store.tenants() else set()
    records = []
    for s in range(bank.n_sessions):
        turns = [{"id": bank.utt_ids[u], "speaker": bank.utt_speakers[u], "text": bank.utt_texts[u]}
                 for u in range(bank.offsets[s], bank.offsets[s + 1]) if bank.utt_texts[u].strip()]
        sid = bank.session_ids[s]
        if sid not in held and turns:  # a session with no text holds nothing to search
            date = bank.session_dates[s]
            records.append({"id": sid, "date": None if math.isnan(date) else date, "utterances": turns,
                            "metadata": ds.session_metadata.get(sid, {})})
    records = records[: args.limit]
    first: dict[str, str] = {}  # a tenant holds an utterance id once: refused before anything is written
    for record in records:
        for utt in record["utterances"]:
            if first.setdefault(utt["id"], record["id"]) != record["id"]:
                raise ValueError(f"--dataset: utterance id {utt['id']!r} is in sessions {first[utt['id']]!r} and "
                                 f"{record['id']!r}, and a tenant holds an id once (LoCoMo's dia_ids repeat in every "
                                 "conversation; a LongMemEval session kept apart repeats its ids)")
    if args.tenant not in store.tenants():
        store.create_tenant(args.tenant)
    for lo in range(0, len(records), CHUNK):
        try:
            store.add_sessions(args.tenant, records[lo : lo + CHUNK])
        except (ValueError, TypeError) as exc:  # it names sessions[i] of this chunk: name the session instead
            at = re.match(r"sessions\[(\d+)\]", str(exc))
            which = f"session {records[lo + int(at.group(1))]['id']!r}: " if at else ""
            chunk = min(CHUNK, len(records) - lo)
            raise type(exc)(f"{which}{exc} (the {chunk} sessions of its batch were not imported; the {lo} before "
                            "them were)") from exc
    print(f"imported {len(records)} sessions into {args.tenant!r} ({len(held)} were there)")
    return 0


def _export(store, args) -> int:
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for sid in store.session_ids(args.tenant):
            s = store.get_session(args.tenant, sid)
            date = None if math.isnan(s.date) else datetime.fromtimestamp(s.date, timezone.utc).isoformat()
            out.write(json.dumps({"type": "session", "id": s.id, "date": date, "metadata": dict(s.metadata),
                                  "utterances": [{"id": u.id, "speaker": u.speaker, "text": u.text}
                                                 for u in s.utterances]}, ensure_ascii=False) + "\n")
    finally:
        if args.output:
            out.close()
    return 0


def _stats(store, args) -> int:
    files = {p.name: p.stat().st_size for p in Path(args.data).rglob("*") if p.is_file()}
    print(json.dumps({"tenants": {t: store.stats(t) for t in store.tenants()}, "files_bytes": files}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
