"""specgen diff: what a change to a spec breaks (interface, checkpoints) and what else it changes (docs/review.md)."""
