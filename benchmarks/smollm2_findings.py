"""The decoder findings on a real LLM: SmolLM2-135M-Instruct (model.path=smollm2), printed as the README's tables.

Runs, in one temporary tracking store (nothing is left behind):

1. ``induction`` on SmolLM2 (``--windows`` windows of 2 x 50 seeded random tokens): the top induction and
   previous-token heads, each beside chance;
2. ``paper`` on SmolLM2, on its random-weights control (``model.init=random``) and on the bundled MiniLM
   (``--windows`` BBC windows of 128 tokens each): the distance profile of high-CSM pairs by depth beside
   MiniLM's, the attention-sink mass (attention on the first token) by layer, the degenerate heads (high pairs
   decided by ties), and the report's verdicts for SmolLM2 against its control;
3. ``ablation`` of the top ``--top`` induction heads of run 1 against ``--draws`` random head sets of the same
   size (seeded), on ``--ablation-windows`` repeated-token windows: the in-context loss (the second copy's
   next-token loss) beside the first copy's, with z-scores and the report's verdicts.

Usage:
    python benchmarks/smollm2_findings.py                 # 64 windows; about 10 minutes on 2 CPU cores
    python benchmarks/smollm2_findings.py --windows 16    # a quick look
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from _options import positive  # benchmarks/, the script's folder


def depth_groups(n_layers: int):
    """Early, middle and final thirds of a model's layers (the report's rule: g = max(1, round(L / 3)))."""
    g = max(1, round(n_layers / 3))
    return {"early": list(range(g)), "middle": list(range(g, n_layers - g)), "final": list(range(n_layers - g, n_layers))}


def top_heads(score, chance, count):
    """The ``count`` heads with the largest score: (name, score, score / chance)."""
    flat = score.flatten()
    order = flat.argsort(descending=True)[:count]
    heads = score.shape[1]
    return [(f"L{int(i) // heads:02d}H{int(i) % heads:02d}", float(flat[i]), float(flat[i] / chance.flatten()[i])) for i in order]


def group_mean(values, layers):
    import torch

    return float(torch.nanmean(values[layers])) if layers else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=positive, default=64, help="windows of the induction and paper runs (default 64)")
    parser.add_argument("--ablation-windows", type=positive, default=32, help="repeated-token windows of the ablation run (default 32)")
    parser.add_argument("--top", type=positive, default=5, help="induction heads ablated together (default 5)")
    parser.add_argument("--draws", type=positive, default=10, help="random head sets of the same size (default 10)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import attnsim
    from attnsim.analysis.report import glance_text, load_runs

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        quiet = ["trainer.progress_bar=false", "tracking.figures=false", "plots.explorer=false", f"tracking.uri={uri}"]
        induction = attnsim.run("induction", ["model.path=smollm2", f"corpus.limit={args.windows}"] + quiet)
        paper = {
            "SmolLM2-135M": attnsim.run("paper", ["model.path=smollm2", f"corpus.limit={args.windows}", "trainer.batch_size=16"] + quiet),
            "SmolLM2 random": attnsim.run(
                "paper", ["model.path=smollm2", "model.init=random", f"corpus.limit={args.windows}", "trainer.batch_size=16"] + quiet
            ),
            "MiniLM-L6": attnsim.run("paper", [f"corpus.limit={args.windows}"] + quiet),
        }
        select = f"interventions.select={{run: {induction.run_id}, metric: induction/induction_score, top: {args.top}}}"
        ablation = attnsim.run(
            "ablation",
            [
                "model.path=smollm2",
                "corpus=repeated_tokens",
                f"corpus.limit={args.ablation_windows}",
                "interventions.heads=null",
                f"interventions.random_draws={args.draws}",
                select,
            ]
            + quiet,
        )
        _, report_runs = load_runs([paper["SmolLM2-135M"].run_id, paper["SmolLM2 random"].run_id], uri)
        glance = glance_text(report_runs)
        _, ablation_runs = load_runs([ablation.run_id], uri)
        ablation_glance = glance_text(ablation_runs)

    s = induction.summaries["induction"].scalars
    print(f"## SmolLM2-135M-Instruct: induction ({args.windows} windows of 2 x 50 random tokens)\n")
    print("| rank | induction head | score | × chance | previous-token head | score | × chance |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    induction_top = top_heads(s["induction_score"], s["induction_score_chance"], 5)
    previous_top = top_heads(s["prev_token_score"], s["prev_token_score_chance"], 5)
    for rank, ((h1, v1, r1), (h2, v2, r2)) in enumerate(zip(induction_top, previous_top), start=1):
        print(f"| {rank} | {h1} | {v1:.3f} | {r1:.0f}× | {h2} | {v2:.3f} | {r2:.0f}× |")
    print(
        f"\nchance: induction {float(s['induction_score_chance'].flatten()[0]):.4f}, previous token {float(s['prev_token_score_chance'].flatten()[0]):.4f} (uniform attention over the allowed keys)"
    )

    print(f"\n## High-CSM pairs by depth ({args.windows} BBC windows of 128 tokens; layer means, chance in brackets)\n")
    print("| model | group (layers) | short-range share (j − i ≤ 4) | long-range share (j − i ≥ 64) | mean distance |")
    print("| --- | --- | --- | --- | --- |")
    for name in ("SmolLM2-135M", "MiniLM-L6"):
        d = paper[name].summaries["distance"].scalars
        for group, layers in depth_groups(d["short_range_share"].shape[0]).items():
            span = f"{layers[0]}-{layers[-1]}" if len(layers) > 1 else str(layers[0])
            cells = [
                f"{group_mean(d[stat], layers):.3f} ({group_mean(d[stat + '_chance'], layers):.3f})"
                for stat in ("short_range_share", "long_range_share", "high_mean_distance")
            ]
            print(f"| {name} | {group} ({span}) | " + " | ".join(cells) + " |")

    print("\n## Attention-sink mass: attention on the first token, by layer (mean over heads and queries)\n")
    sink = paper["SmolLM2-135M"].summaries["separators"].scalars["attention_cls"].nanmean(1)
    control = paper["SmolLM2 random"].summaries["separators"].scalars["attention_cls"].nanmean(1)
    print("| layers | SmolLM2-135M | random-weights control |")
    print("| --- | --- | --- |")
    for start in range(0, len(sink), 6):
        stop = min(start + 6, len(sink))
        print(
            f"| {start}-{stop - 1} | "
            + " ".join(f"{float(v):.2f}" for v in sink[start:stop])
            + " | "
            + " ".join(f"{float(v):.2f}" for v in control[start:stop])
            + " |"
        )

    c = paper["SmolLM2-135M"].summaries["csm"].scalars
    flagged = [(f"L{layer:02d}H{head:02d}", float(c["tie_share"][layer, head])) for layer, head in (c["degenerate"] == 1).nonzero().tolist()]
    print(f"\n## Degenerate heads (high pairs decided by ties): {len(flagged)} of {c['degenerate'].numel()}\n")
    print(", ".join(f"{h} (tie share {v:.2f})" for h, v in sorted(flagged, key=lambda x: -x[1])) or "none")
    print(f"\nmean tie share over all heads: {float(c['tie_share'].nanmean()):.3f}")

    print("\n## `attnsim report` on SmolLM2 and its random-weights control\n")
    print("```\n" + glance.rstrip() + "\n```")

    m = ablation.summaries["ablation"].metrics
    print(f"\n## Ablating the top {args.top} induction heads ({args.ablation_windows} windows, {args.draws} random sets of {args.top} heads, zero ablation)\n")
    print("| metric (nats) | clean | top heads ablated | effect | random sets: mean ± sd | z |")
    print("| --- | --- | --- | --- | --- | --- |")
    for metric in ("repeat_loss", "first_copy_loss", "lm_loss"):
        print(
            f"| `{metric}` | {m['clean_' + metric]:.3f} | {m['top_' + metric]:.3f} | {m['top_' + metric + '_effect']:+.3f} | "
            f"{m['top_' + metric + '_random_mean']:+.3f} ± {m['top_' + metric + '_random_std']:.3f} | {m['top_' + metric + '_zscore']:.1f} |"
        )
    print("\n```\n" + ablation_glance.rstrip() + "\n```")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
