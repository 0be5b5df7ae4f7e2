"""The calibration's type prior (``AssoMemConfig.type_prior``: each question type's CMI shrunk towards all the
calibration questions' as if that many questions had measured the latter), scored as the eval CLI scores the engine:
each question's features once (the config the options give), fused with weights calibrated on the other folds (the
CLI's folds, T_w chosen by calibration's inner cross-validation) at each prior. The row of the options' own
``--type-prior`` gives the eval CLI's figures with those options, to the digit.

    python benchmarks/type_prior.py --dataset SPEC [--haystack-sessions N --limit N] [--priors 0 3 10 30 100]
        [--output FILE.json]

docs/results-history.md, "Type prior".
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from types import SimpleNamespace

from signal_variants import cross_validated, features, report

from assomem_gpu.backend import get_backend


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--priors", type=float, nargs="+", default=[0, 3, 10, 30, 100], help="type priors (questions)")
    p.add_argument("--output", help="JSON file for the figures")
    own, rest = p.parse_known_args()
    args, data, method, feats, folds = features(rest)
    signals, questions, backend = list(method.config.signals), list(range(len(feats))), get_backend("cpu")
    figures = {f"type prior {m:g}": cross_validated(data, SimpleNamespace(config=replace(method.config, type_prior=m)),
                                                    questions, feats, signals, folds, backend)
               for m in own.priors}
    report(figures, args, own.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
