"""A GGUF model's first use against its later ones: converting SmolLM2 (or any .gguf) once, then loading the cache.

Three fresh processes, each timed as a whole (wall seconds, peak resident memory of exactly that child):

1. ``convert``: ``resolve_model_path(MODEL)`` with an empty cache (``ATTNSIM_CACHE`` set to a temporary
   folder): the header checks and the conversion to a float32 model folder;
2. ``cached``: the same call again (the cache hit: the file's SHA-256 and a folder lookup);
3. ``load``: the cached folder loaded as ``attnsim run`` loads it (``AutoModel.from_pretrained``, eager
   attention) plus its tokenizer; and, beside it, the bundled MiniLM loaded the same way.

Usage:
    python benchmarks/gguf_load.py                      # smollm2
    python benchmarks/gguf_load.py --model /path/model.gguf
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from end_to_end import timed  # benchmarks/, the script's folder: a child's wall time and its own peak RSS

RESOLVE = "import sys\nfrom attnsim.capture.load import resolve_model_path\nprint(resolve_model_path(sys.argv[1]))"
LOAD = (
    "import sys, time\nstart = time.perf_counter()\nfrom attnsim.capture.load import resolve_model_path\n"
    "from transformers import AutoModel, AutoTokenizer\nimported = time.perf_counter()\n"
    "path = resolve_model_path(sys.argv[1])\nAutoTokenizer.from_pretrained(path)\n"
    "AutoModel.from_pretrained(path, attn_implementation='eager')\n"
    "print(f'LOAD {time.perf_counter() - imported:.2f} {imported - start:.2f}')"
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="model.path of a GGUF model: smollm2 or a .gguf file (default smollm2)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", ATTNSIM_CACHE=cache)
        rows = []
        first = timed([sys.executable, "-c", RESOLVE, args.model], env)
        folder = first["stdout"].strip().splitlines()[-1]
        size = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files) / 2**20
        rows.append(("first use: check + convert (empty cache)", first["wall"], first["peak_mib"], ""))
        hit = timed([sys.executable, "-c", RESOLVE, args.model], env)
        rows.append(("later use: cache hit (hash + lookup)", hit["wall"], hit["peak_mib"], ""))
        for model in (args.model, "bundled"):
            loaded = timed([sys.executable, "-c", LOAD, model], env)
            load, imports = (float(x) for x in loaded["stdout"].strip().splitlines()[-1].split()[1:])
            rows.append((f"later use: load {model} (model + tokenizer)", loaded["wall"], loaded["peak_mib"], f"{load:.1f} s loading, {imports:.1f} s imports"))
    print(f"model {args.model}: converted folder {size:,.0f} MiB")
    print("| step (a fresh process each) | wall | peak RSS | of which |")
    print("| --- | --- | --- | --- |")
    for name, wall, peak, note in rows:
        print(f"| {name} | {wall:.1f} s | {peak:,.0f} MiB | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
