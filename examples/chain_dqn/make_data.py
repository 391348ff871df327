"""Write chain.npz: logged transitions of the chain MDP (chain.py) under a uniform random policy.

    python examples/chain_dqn/make_data.py

Episodes start in a uniformly drawn non-terminal state and take uniformly random actions until
they reach the terminal state or 10 steps; 1024 transitions, seed 0, so the arrays are reproducible.
Arrays: `state` and `next_state` one-hot float32 [N, 6], `action` int32 [N, 1], `reward` and `done`
float32 [N, 1]. No labels: the spec's loss reads its target from the model's `td_target` output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from chain import ACTIONS, STATES, TERMINAL, step

TRANSITIONS = 1024
MAX_EPISODE = 10
SEED = 0


def _episodes(count: int, seed: int) -> tuple[list[tuple[int, int, float, int, bool]], list[bool]]:
    """The logged rows and, per row, whether it starts an episode."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[int, int, float, int, bool]] = []
    starts: list[bool] = []
    while len(rows) < count:
        state = int(rng.integers(0, TERMINAL))
        for i in range(MAX_EPISODE):
            action = int(rng.integers(0, ACTIONS))
            following, reward, done = step(state, action)
            rows.append((state, action, reward, following, done))
            starts.append(i == 0)
            if done or len(rows) == count:
                break
            state = following
    return rows, starts


def episode_starts(count: int = TRANSITIONS, seed: int = SEED) -> np.ndarray:
    """bool [N]: whether row i of `transitions()` is the first step of an episode (make_history.py)."""
    return np.array(_episodes(count, seed)[1])


def transitions(count: int = TRANSITIONS, seed: int = SEED) -> dict[str, np.ndarray]:
    rows, _ = _episodes(count, seed)
    states, actions, rewards, following, done = (np.array(column) for column in zip(*rows, strict=True))
    eye = np.eye(STATES, dtype=np.float32)
    return {"state": eye[states], "action": actions.astype(np.int32)[:, None],
            "reward": rewards.astype(np.float32)[:, None], "next_state": eye[following],
            "done": done.astype(np.float32)[:, None]}


def main() -> None:
    out = Path(__file__).parent / "chain.npz"
    arrays = transitions()
    np.savez(out, **arrays)
    counts = np.bincount(arrays["state"].argmax(axis=1), minlength=STATES)
    print(f"wrote {out.name}: {TRANSITIONS} transitions; per state {counts.tolist()}; "
          f"{int(arrays['done'].sum())} reach the terminal state")


if __name__ == "__main__":
    main()
