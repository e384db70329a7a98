"""The soak (marker `soak`) and its checker and fault rules."""
