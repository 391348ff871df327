"""Q* of the chain MDP (chain.py) by value iteration in float64.

    python examples/chain_dqn/value_iteration.py

prints Q* for the non-terminal states and the greedy policy; tests/test_targets_dqn.py compares
the trained Q-network of examples/specs/chain_dqn.yaml with `optimal_q()`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from chain import ACTIONS, GAMMA, STATES, TERMINAL, step


def optimal_q(tolerance: float = 1e-12) -> np.ndarray:
    """[non-terminal states, actions] Q*, iterated until no entry moves by more than `tolerance`."""
    q = np.zeros((TERMINAL, ACTIONS), dtype=np.float64)
    while True:
        value = np.append(q.max(axis=1), 0.0)  # the terminal state is worth nothing
        new = np.empty_like(q)
        for s in range(TERMINAL):
            for a in range(ACTIONS):
                following, reward, done = step(s, a)
                new[s, a] = reward + (0.0 if done else GAMMA * value[following])
        if np.max(np.abs(new - q)) < tolerance:
            return new
        q = new


def main() -> None:
    q = optimal_q()
    print(f"Q* of the {STATES}-state chain (state {TERMINAL} terminal), gamma {GAMMA}:")
    print("state  Q*(left)  Q*(right)  greedy")
    for s, (left, right) in enumerate(q):
        print(f"{s:>5}  {left:8.4f}  {right:9.4f}  {'right' if right > left else 'left'}")


if __name__ == "__main__":
    main()
