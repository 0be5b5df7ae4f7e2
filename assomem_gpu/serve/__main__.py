"""``python -m assomem_gpu.serve --data DIR``: the memory service on uvicorn.

The admin key comes from ``--admin-key`` or ``$ASSOMEM_ADMIN_KEY``. The store's encoder, config and device are the
store's defaults unless given (the clue merge: leaders, see ``--clue-merge``; sentence passages on, see
``--no-sentences``).
"""
from __future__ import annotations

import argparse
import os
import sys

from ..cli_options import add_store_config_options, store_config
from ..encode import ENCODER_HELP, RUNTIMES, add_prompt_options
from .models import MAX_BODY_BYTES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m assomem_gpu.serve", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="the store's directory (store.sqlite, snapshots/)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--encoder", default="all-MiniLM-L6-v2", help=ENCODER_HELP)
    p.add_argument("--encoder-runtime", default="auto", choices=RUNTIMES,
                   help="what runs the encoder (auto: onnxruntime on a CPU where installed, else torch; see "
                        "encode.encoder_runtime)")
    add_prompt_options(p)
    p.add_argument("--admin-key", default=os.environ.get("ASSOMEM_ADMIN_KEY"), help="default $ASSOMEM_ADMIN_KEY")
    add_store_config_options(p)
    p.add_argument("--llm", default="smollm2",
                   help="LLM of /v1/answer (loaded on the first answer): smollm2 (needs the llm extra), "
                        "hf:<model>[::<gguf>], openai:<url>#<model>")
    p.add_argument("--max-answers", type=int, default=4, help="answers generating at once (more: 429)")
    p.add_argument("--undated", action="store_true", help="sessions and questions may have no date")
    p.add_argument("--max-loaded", type=int, default=8, help="tenant indexes held in memory")
    p.add_argument("--snapshot-every-s", type=float, default=5.0,
                   help="how often a tenant written to gets a new snapshot, in the background (restarts load it)")
    p.add_argument("--max-body-mb", type=float, default=MAX_BODY_BYTES / 2**20, help="request body limit")
    p.add_argument("--batch-wait-ms", type=float, default=0.0,
                   help="how long a search waits, besides the tenant's running search, for concurrent ones to share "
                        "its engine call")
    p.add_argument("--max-waiting", type=int, default=4096,
                   help="questions waiting for their search at most, all tenants together (more: 429)")
    args = p.parse_args(argv)
    if args.max_answers < 1:
        p.error("--max-answers must be at least 1")
    if not args.batch_wait_ms >= 0:  # NaN too
        p.error("--batch-wait-ms must be a number >= 0")
    if args.max_waiting < 1:
        p.error("--max-waiting must be at least 1")
    if not args.admin_key:
        print("error: an admin key is needed: --admin-key or $ASSOMEM_ADMIN_KEY", file=sys.stderr)
        return 2
    import uvicorn

    from ..encode import make_encoder, model_runtime, prompt_options
    from ..llm import make_llm
    from ..store import MemoryStore, StoreError
    from .app import create_app

    try:
        make_llm(args.llm)  # the spec is checked now; the weights load on the first answer
    except ValueError as exc:
        print(f"error: --llm: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"warning: /v1/answer will answer 503: {exc}", file=sys.stderr)
    try:
        runtime = args.encoder_runtime
        if args.encoder != "hashing":  # chosen once, printed, then built as chosen
            runtime, why = model_runtime(args.encoder, runtime=runtime)
            print(f"encoder runtime: {runtime} ({why})", file=sys.stderr)
        config = store_config(args)
        encoder = make_encoder(args.encoder, cache=False, runtime=runtime, prompts=prompt_options(args))
        store = MemoryStore(args.data, encoder, config, device=args.device,
                            dated=not args.undated, max_loaded=args.max_loaded,
                            snapshot_every_s=args.snapshot_every_s)
    except (StoreError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app = create_app(store, args.admin_key, int(args.max_body_mb * 2**20), args.batch_wait_ms / 1000, args.llm,
                     args.max_answers, args.max_waiting)
    # uvicorn's own lines say where it listens; no line per request. The app closes the store as it stops.
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
