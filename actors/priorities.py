"""Initial priorities for prioritized replay, computed where the data is made (Ape-X).

A collector knows each new transition's |n-step TD error| under its own copy of the network, at
the cost of one forward pass over the chunk's observations and next observations together:

    td = return + discount * max_a Q(next_obs, a) - Q(obs, action)

(the collector's network stands in for both the online and the target network, so Double DQN's
target reduces to the max). Sent with the chunk, these spare the learner a pass over data it has
never seen, and new transitions start at the priority they deserve instead of the largest seen.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def td_priorities(q_values: Callable[[np.ndarray], np.ndarray], obs: np.ndarray, action: np.ndarray,
                  returns: np.ndarray, discount: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
    """|n-step TD error| of every transition, float32 [N], from one call of `q_values` on
    obs and next_obs stacked."""
    count = len(action)
    if count == 0:
        return np.zeros(0, np.float32)
    q = q_values(np.concatenate([obs, next_obs]))
    taken = q[np.arange(count), np.asarray(action, np.int64)]
    target = np.asarray(returns, np.float32) + np.asarray(discount, np.float32) * q[count:].max(axis=1)
    return np.abs(target - taken).astype(np.float32)
