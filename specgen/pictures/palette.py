"""The graph's colours and legend words, shared by the SVG (graph.py) and the dot/mermaid text (graph_text.py)."""

FILL = {"trainable": "#cfe2ff", "frozen": "#d0d0d0", "partly_frozen": "#fff0b3", "target": "#e5d4f7",
        "stateless": "#ffffff", "input": "#d4f4dd", "output": "#ffe0c2", "block": "#eeeeee"}
LEGEND = {"trainable": "trainable", "frozen": "frozen", "partly_frozen": "partly frozen",
          "target": "target copy", "stateless": "no weights", "input": "input", "output": "output",
          "block": "block (mixed)"}
BADGE = {"update": ("#ffd6d6", "update", "updated each step (batch-norm statistics)"),
         "ema": ("#c9f0e8", "EMA", "averaged (EMA shadow)")}
