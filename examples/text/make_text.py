"""Write sentiment.npz: a synthetic sentence-sentiment task where word order matters (for text_transformer.yaml).

    python examples/text/make_text.py

Each example is SEQ token ids (no padding): neutral words, positive and negative words, and the word
"not", which flips the polarity of the word right after it ("not good" is negative). The label is 1 when
the polarities, after the flips, sum above 0 (sentences whose sum is 0 are drawn again). A bag of words
cannot tell "not good ... bad" from "good ... not bad": the model must see which word follows "not".
Arrays: x_train int32 [TRAIN, SEQ], y_train int32 [TRAIN], x_test int32 [TEST, SEQ], y_test int32 [TEST].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SEQ, VOCAB = 16, 32
NEUTRAL = range(1, 20)  # id 0 is left free (a padding id for a masked variant)
POSITIVE, NEGATIVE = range(20, 25), range(25, 30)
NOT = 30
TRAIN, TEST, SEED = 4000, 1000, 0


def polarity(tokens: np.ndarray) -> int:
    """The sum of the word polarities, each flipped when "not" comes right before it."""
    total, flip = 0, False
    for token in tokens:
        sign = 1 if token in POSITIVE else -1 if token in NEGATIVE else 0
        total += -sign if flip else sign
        flip = token == NOT
    return total


def sentence(rng: np.random.Generator) -> np.ndarray:
    """SEQ tokens: mostly neutral, 2-4 polar words, each preceded by "not" half the time."""
    tokens = rng.choice(list(NEUTRAL), SEQ)
    places = rng.choice(np.arange(1, SEQ), rng.integers(2, 5), replace=False)
    for place in places:
        tokens[place] = rng.choice(list(POSITIVE) + list(NEGATIVE))
        if rng.random() < 0.5 and place - 1 not in places:
            tokens[place - 1] = NOT
    return tokens


def dataset(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    rows, labels = [], []
    while len(rows) < count:
        tokens = sentence(rng)
        total = polarity(tokens)
        if total != 0:
            rows.append(tokens)
            labels.append(int(total > 0))
    return np.asarray(rows, np.int32), np.asarray(labels, np.int32)


def main() -> None:
    rng = np.random.default_rng(SEED)
    x_train, y_train = dataset(TRAIN, rng)
    x_test, y_test = dataset(TEST, rng)
    path = Path(__file__).parent / "sentiment.npz"
    np.savez_compressed(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    print(f"wrote {path}: {TRAIN} train, {TEST} test, {y_train.mean():.3f} positive")


if __name__ == "__main__":
    main()
