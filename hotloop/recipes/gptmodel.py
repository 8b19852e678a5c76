"""A small byte-level GPT (GPT-2 architecture, vocabulary 256) for the `gpt` recipe.

Initialisation follows GPT-2: N(0, 0.02) weights, zero biases, and the residual projections scaled
by 1/sqrt(2 * n_layer) so the residual stream's variance does not grow with depth. The first logits
have a standard deviation of about 0.02 * sqrt(n_embd), so the first loss is ln(256) = 5.545 plus
about half their variance - within 1% - which is the seeds' initial-loss check.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hotloop.config import GPTConfig

VOCAB = 256


class SelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """`forward(idx, targets)` returns the mean cross-entropy; `forward(idx)` returns logits.

    `vocab_size` and `tie_weights` make the same architecture GPT-2 proper (50257 tokens, the head tied
    to the token embedding: 124M parameters at 12x768), which the `gpt2` benchmark workload uses.
    """

    def __init__(self, cfg: GPTConfig, vocab_size: int = VOCAB, tie_weights: bool = False) -> None:
        super().__init__()
        self.cfg, self.vocab_size = cfg, vocab_size
        self.wte = nn.Embedding(vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        # Untied head: with a tied one, each position's own byte gets a logit boost of |wte[x]|^2 / std,
        # and on code (long runs of spaces) the first loss lands ~5% under ln(256) instead of on it.
        self.head = nn.Linear(cfg.n_embd, vocab_size, bias=False)
        self.apply(self._init)
        if tie_weights:
            self.head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def hotloop_blocks(self) -> list[nn.Module]:
        """Block order for layer-wise LR decay."""
        return list(self.blocks)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, self.vocab_size), targets.reshape(-1))

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.8,
        top_k: int | None = 50,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample `max_new_tokens` bytes after `idx` (B, T); everything stays on the device."""
        for _ in range(max_new_tokens):
            ctx = idx[:, -self.cfg.block_size :]
            logits = self(ctx)[:, -1, :].float() / max(temperature, 1e-5)
            if top_k:
                kth = torch.topk(logits, min(top_k, self.vocab_size)).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx
