"""What the GPT-2 small workload's MFU is made of, on the best hand-written loop (`plain`), CUDA only.

    python3 bench/probes/gpt2_mfu_knobs.py

Runs `plain` (compiled, bf16, fused AdamW, clipping) for 8 warm-up and 40 measured steps at each
(vocabulary, batch) pair: the real vocabulary (50257) against one padded to a multiple of 64 (50304, the
usual GPT-2 trick; the extra logits are never targets), and batch 16 / 32 / 64 x 1024. MFU counts the
real model's FLOPs only (6N + 12LTC per token, N with the 50257-row tied embedding) against the
device's dense bf16 peak, so padding shows up as speed, not as extra counted work.
"""

from __future__ import annotations

import torch

from hotloop.benchmarks import peak_flops
from hotloop.benchmarks.variants import Window, run_plain
from hotloop.benchmarks.workloads import _gpt_workload
from hotloop.config import GPTConfig
from hotloop.recipes.gptmodel import GPT


def main() -> None:
    dev = torch.device("cuda")
    peak = peak_flops(torch.cuda.get_device_name(dev))
    assert peak is not None, "unknown GPU: no peak to compute MFU against"
    cfg = GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024)
    per_token = _gpt_workload("gpt2", cfg, 50257, True, 16, 64, True).flops_per_step / (16 * 1024)
    for vocab, batch in [(50257, 16), (50304, 16), (50257, 32), (50304, 32), (50304, 64)]:
        torch._dynamo.reset()
        w = _gpt_workload("gpt2", cfg, 50257, True, batch, 64 * 32, True)
        w.make_model = lambda v=vocab: GPT(cfg, v, True)
        window = Window(dev, 8, 40)
        run_plain(w, dev, window)
        sps = 40 / window.seconds
        mfu = sps * batch * 1024 * per_token / peak
        print(f"vocab {vocab} batch {batch}: {sps:.2f} steps/s, {sps * batch * 1024:.0f} tokens/s, MFU {mfu:.1%}, "
              f"peak {window.peak_mb:.0f} MB", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
