"""Rules about the repository itself: module layout, action declarations, references in docs."""
