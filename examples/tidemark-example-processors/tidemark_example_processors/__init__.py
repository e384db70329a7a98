"""Example Tidemark processors, registered through the `tidemark.processors` entry point."""
