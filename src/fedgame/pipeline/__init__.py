"""The pipeline from a recipe to a results folder: recipes (``config``), building the run's
pieces from them (``build``), running it (``runner``), its files (``store``) and run tracking
(``tracking``). Below ``deploy`` (Flower runs the same pipeline) and ``experiments`` (the
papers' tables and figures read what it writes); imports flow core ← leaves ← sim ← pipeline ←
deploy ← experiments ← cli."""
