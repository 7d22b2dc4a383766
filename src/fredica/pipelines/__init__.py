"""Pipeline templates, request validation, spawning and routing."""
