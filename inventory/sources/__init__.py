"""One folder per source kind (control side): config check, discovery, item source and the read
spec a worker gets, answered by the kind's `SourceKind` object (`<kind>/kind.py`, hooks in
`base.py`). `registry.py` maps each connector to its kind (`kind_of`); the worker's readers are
mirrored in `workers/spark/sources/`. See docs/sources/adding-a-source-kind.md."""
