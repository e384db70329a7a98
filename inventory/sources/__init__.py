"""One module per source kind (control side): config check, discovery, item source and the read
spec a worker gets. `registry.py` maps each kind's name to its module; the worker's readers are
mirrored in `workers/spark/sources/`. See docs/sources/adding-a-source-kind.md."""
