"""Issue 17 and its followers: what a hostile user may name, reach or read, by any route."""
