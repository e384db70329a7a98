"""The `tidemark` command and the client's own rules (redirects), and the tutorial run as written."""
