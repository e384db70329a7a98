"""The `tidemark` command: Tidemark's REST API from a terminal, pipelines as code, and a local run
of a processor on a sample of a connector's items. No Django: it speaks only the API."""
