"""File formats: COLMAP depth/normal maps, PLY clouds, pair files; all writes are atomic."""
