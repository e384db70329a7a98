"""A batch's life: acquire, commit, fail, reap; watermarks, exactly once, restatements."""
