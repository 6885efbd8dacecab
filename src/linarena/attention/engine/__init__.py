"""The engine: the computation of every linear recurrence, one folder per operation, fla's
layout of files (chunk.py, the one-token step, naive.py side by side).

  gated/   gated linear attention (RetNet, GLA, Mamba-2's SSD): op.py (the function, its
           backend), chunk.py (the chunked kernel, decay_blocks.py its intra-chunk sums),
           step.py (one token), naive.py (float64 references: the token-by-token loop and the
           quadratic form).
  delta/   the delta rule (DeltaNet, Gated DeltaNet): op.py, chunk.py, step.py, naive.py.
  linear/  the kernel-map sums of the feature-map linear attentions: chunk.py (causal),
           bidirectional.py, step.py (one token), naive.py (quadratic float64 references).
           linear/common.py: their notation, key weights, eps and state.
  recurrence.py  what the recurrences (gated/, delta/) share: input checks, padding, the
                 backend branch, the frame of a one-token step, the chunk layout.
  common.py   what every op shares: the compute dtype, autocast off, the chunk budget.
  backend.py  the one backend rule (auto / torch / fla) and fla-core's kernel calls.

A recurrence's one-token step (gated_linear_attention_step, delta_rule_step) is its closed-form
update of the state, O(1) small ops per token: decoding (RecurrentAttention.step, a whole
layer's step) runs it on the torch backend instead of a chunked pass over one token.
Sliding-window attention is softmax over a band (not separable), so it has no engine folder.
"""

from linarena.attention.engine.delta.op import delta_rule
from linarena.attention.engine.delta.step import delta_rule_step
from linarena.attention.engine.gated.op import gated_linear_attention
from linarena.attention.engine.gated.step import gated_linear_attention_step

__all__ = ["delta_rule", "delta_rule_step", "gated_linear_attention",
           "gated_linear_attention_step"]
