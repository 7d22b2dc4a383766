"""Task storage: the `TaskStore` seam and its SQLite implementation."""
