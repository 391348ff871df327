"""Write chain_history.npz: the transitions of chain.npz, each with the window of states that led to it.

    python examples/chain_dqn/make_history.py

The recurrent Q-network of examples/specs/chain_drqn.yaml reads what an agent with memory reads:
the last HISTORY observations, oldest first, ending at the current state. The episodes and actions
are make_data.py's (same seed, same 1024 transitions), so Q* is value_iteration.py's. Steps before an
episode's start are all-zero rows (pre-padding, as keras' pad_sequences does by default).
Arrays: `history` and `next_history` float32 [N, HISTORY, 6] (next_history is history moved one step
on: it ends at next_state), `action` int32 [N, 1], `reward` and `done` float32 [N, 1].
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from chain import STATES
from make_data import episode_starts, transitions

HISTORY = 4


def windows(arrays: dict[str, np.ndarray], starts: np.ndarray, length: int = HISTORY) -> dict[str, np.ndarray]:
    """history / next_history windows over the rows of one episode each, zero rows before its start."""
    count = len(starts)
    history = np.zeros((count, length, STATES), dtype=np.float32)
    episode_start = 0
    for row in range(count):
        if starts[row]:
            episode_start = row
        first = max(episode_start, row - length + 1)
        taken = arrays["state"][first:row + 1]
        history[row, length - len(taken):] = taken
    next_history = np.concatenate([history[:, 1:], arrays["next_state"][:, None, :]], axis=1)
    return {"history": history, "next_history": next_history,
            **{k: arrays[k] for k in ("action", "reward", "done")}}


def main() -> None:
    out = Path(__file__).parent / "chain_history.npz"
    arrays, starts = transitions(), episode_starts()
    found = windows(arrays, starts)
    np.savez(out, **found)
    print(f"wrote {out.name}: {len(starts)} transitions in {int(starts.sum())} episodes, windows of {HISTORY}")


if __name__ == "__main__":
    main()
