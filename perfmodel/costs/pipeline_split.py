"""Which pipeline stage is the busiest: how a stack splits n_layers transformer layers and the
output head (final norm, logits, loss) over pp stages. Pure numpy over arrays of configurations.

* Even split (pp divides n_layers): n_layers / pp layers per stage, the last one also runs the head.
* Uneven split with the embedding and the loss counted as layers (Megatron-Core
  ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``; BLOOM's
  ``--pp-partition-method 'type:transformer|embedding'``: "pp rank 0: [embed | 5 transformer
  blocks] ... [5 transformer blocks | embed]"): the last stage runs floor(n_layers / pp) layers and
  the head, the others up to ceil(n_layers / pp) layers; the busier of the two sets the pipeline's
  pace. The same rule serves the other uneven splits the data hold, where it is conservative for
  the last stage: DeepSpeed's ``partition_balanced`` (Megatron-DeepSpeed's default 'type:transformer')
  fills the first stages and leaves n_layers - (pp - 1) ceil(n_layers / pp) on the last one, and
  torchtitan's split points also leave the last stage the lightest.
* Cost-balanced split (nanotron ``build_model``: each block's cost from
  ``get_block_compute_costs`` -- a layer 4 h^2 + m ffn h, the LM head V h -- and a greedy pass that
  moves to the next rank once the cumulative cost passes rank r's threshold total (r + 1) / pp):
  simulated block by block; with a large vocabulary the head may get a stage of its own.

The busiest-stage functions return (layers on the busiest stage, 1.0 if that stage runs the head
else 0.0); ``fill_drain_stage_s`` the pace of the pipeline's fill and drain.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np


def uneven_busiest_stage(n_layers, pp, layer_s, head_s):
    """Busiest stage of an even or first-stages-heavier split (see the module docstring)."""
    L = np.asarray(n_layers, dtype=float)
    pp = np.asarray(pp, dtype=float)
    hi, lo = np.ceil(L / pp), np.floor(L / pp)
    uneven = (pp > 1) & (hi > lo)
    head_wins = head_s > (hi - lo) * layer_s
    layers = np.where(uneven & head_wins, lo, hi)
    head = np.where(uneven & ~head_wins, 0.0, 1.0)
    return layers, head


@lru_cache(maxsize=65536)
def _balanced_split(n_layers: int, pp: int, layer_units: float, head_units: float) -> tuple[int, int, int, int]:
    """nanotron's greedy split of n_layers equal blocks and the head over pp ranks, as its loop runs
    (thresholds total * ((rank + 1) / pp), compared with the running sum of block costs): (most layers
    on a rank without the head, layers on the head's rank, the head's rank, most layers on any rank).
    The zero-cost embedding and final-norm blocks never move a boundary."""
    total = layer_units * n_layers + head_units
    cum, rank, count, most = 0.0, 0, 0, 0
    for _ in range(n_layers):
        count += 1
        cum += layer_units
        if cum > total * ((rank + 1) / pp):
            most, rank, count = max(most, count), rank + 1, 0
    return most, count, rank, max(most, count)


def balanced_split_table(n_layers, pp, layer_units, head_units) -> dict[str, np.ndarray]:
    """``_balanced_split`` over arrays, once per distinct (n_layers, pp, costs): arrays ``most``,
    ``with_head``, ``head_rank`` and ``max_layers`` shaped like the broadcast inputs."""
    L, pp, u, H = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (n_layers, pp, layer_units, head_units)))
    keys = np.stack([L.ravel(), pp.ravel(), u.ravel(), H.ravel()], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    splits = np.array([_balanced_split(int(k[0]), max(int(k[1]), 1), float(k[2]), float(k[3])) for k in uniq],
                      dtype=float).reshape(-1, 4)
    cols = splits[inverse.ravel()]
    return {name: cols[:, i].reshape(L.shape) for i, name in enumerate(("most", "with_head", "head_rank",
                                                                        "max_layers"))}


def cost_balanced_busiest_stage(n_layers, pp, layer_units, head_units, layer_s, head_s):
    """Busiest stage of nanotron's cost-balanced greedy split (see the module docstring).

    ``layer_units`` / ``head_units``: the costs the stack balances with; ``layer_s`` / ``head_s``:
    the modelled times that decide which stage is the busiest. The split depends on the costs only,
    so it is computed once per distinct (n_layers, pp, costs) and cached."""
    return busiest_of_split(balanced_split_table(n_layers, pp, layer_units, head_units), layer_s, head_s)


def busiest_of_split(split: dict[str, np.ndarray], layer_s, head_s):
    """(layers, head) of the busiest stage of a ``balanced_split_table``: the fullest stage without
    the head, or the head's stage, whichever takes longer."""
    most, with_head = split["most"], split["with_head"]
    head_wins = with_head * layer_s + head_s >= most * layer_s
    return np.where(head_wins, with_head, most), np.where(head_wins, 1.0, 0.0)


def fill_drain_stage_s(n_layers, pp, layer_s, head_s, busy_stage_s):
    """Mean time per micro-batch of the pp - 1 stages other than the busiest: the pace of the bubble.

    m identical micro-batches through stages of times t_1..t_p finish after
    sum_k t_k + (m - 1) max_k t_k (the proportionate flow shop's makespan, Pinedo, "Scheduling:
    Theory, Algorithms, and Systems", Sec. 6.1), i.e. m max_k t_k plus (p - 1) slots at the mean of the
    other stages. The stages hold n_layers layers of layer_s and one head of head_s between them, so
    that mean is (n_layers layer_s + head_s - busiest) / (p - 1). Equal stages give the busiest stage's
    time, the (p - 1) t bubble of Narayanan et al. (2021); the head, on one stage only, and an uneven
    split's lighter stages make it shorter. Bounded by [0, busiest] (and the busiest for pp = 1).
    """
    pp = np.asarray(pp, dtype=float)
    total = np.asarray(n_layers, dtype=float) * layer_s + head_s
    others = (total - busy_stage_s) / np.maximum(pp - 1.0, 1.0)
    return np.where(pp > 1, np.clip(others, 0.0, busy_stage_s), busy_stage_s)
