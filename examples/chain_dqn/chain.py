"""The chain MDP of examples/specs/chain_dqn.yaml: one definition for the data and for value iteration.

States 0..5 in a row; state 5 is terminal. Action 0 moves left (state 0 stays put), action 1
moves right. Reaching state 5 pays 1.0; staying put at state 0 pays 0.02, a small sure reward a
myopic policy would take; every other move pays 0. Transitions are deterministic, discount 0.9:
the optimal policy goes right everywhere (Q*(0, right) = 0.6561 beats Q*(0, left) = 0.6105).
"""

from __future__ import annotations

STATES = 6
ACTIONS = 2
TERMINAL = STATES - 1
GAMMA = 0.9  # the spec's `discount` rescale must say the same
LEFT, RIGHT = 0, 1


def step(state: int, action: int) -> tuple[int, float, bool]:
    """(next state, reward, whether the next state is terminal) for a non-terminal `state`."""
    if action == RIGHT:
        following = state + 1
        return following, (1.0 if following == TERMINAL else 0.0), following == TERMINAL
    if state == 0:
        return 0, 0.02, False
    return state - 1, 0.0, False
