"""What a batch writes: the files, PostgreSQL and Delta sinks, once per row across reruns."""
